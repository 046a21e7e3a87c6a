// Package clusteridentity keeps what makes several nodus-server replicas one
// cluster: the certificate authority that signs serving, operator and agent
// certificates, and the SSH user CA that hosts trust. The first replica on
// an empty etcd stores them there sealed with a key derived from the
// cluster key file every replica is given; every later replica opens them.
// This is k3s' pattern: its server token seals the CA keys in the datastore.
package clusteridentity

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdKey is where the sealed identity is kept.
const EtcdKey = "/nodus/cluster/identity"

// sealVersion names the derivation and cipher below; a later one would be
// a new value, so that a replica refuses what it cannot open rather than
// misreading it.
const sealVersion = "nodus-identity-v1:hkdf-sha256:aes-256-gcm"

// ErrWrongKey: the cluster key does not open the stored identity, which
// another key sealed (or someone altered).
var ErrWrongKey = errors.New("the cluster key does not open the cluster identity stored in etcd: every replica must be given the same --cluster-key-file")

// Identity is the signing keys of a cluster, in PEM.
type Identity struct {
	CACert       []byte `json:"caCert"`
	CAKey        []byte `json:"caKey"`
	SSHUserCAKey []byte `json:"sshUserCAKey"`
}

func (id Identity) complete() error {
	if len(id.CACert) == 0 || len(id.CAKey) == 0 || len(id.SSHUserCAKey) == 0 {
		return errors.New("the cluster identity lacks the CA certificate, the CA key or the SSH user CA key")
	}
	return nil
}

// sealed is the stored form.
type sealed struct {
	Version string `json:"version"`
	Salt    []byte `json:"salt"`
	Nonce   []byte `json:"nonce"`
	Data    []byte `json:"data"`
}

// Seal encrypts id with a key derived from the cluster key.
func Seal(clusterKey []byte, id Identity) ([]byte, error) {
	if err := id.complete(); err != nil {
		return nil, err
	}
	plain, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	s := sealed{Version: sealVersion, Salt: make([]byte, 16)}
	if _, err := rand.Read(s.Salt); err != nil {
		return nil, err
	}
	aead, err := newAEAD(clusterKey, s.Salt)
	if err != nil {
		return nil, err
	}
	s.Nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(s.Nonce); err != nil {
		return nil, err
	}
	s.Data = aead.Seal(nil, s.Nonce, plain, []byte(sealVersion))
	return json.Marshal(s)
}

// Open decrypts what Seal made; ErrWrongKey when the key is another.
func Open(clusterKey, stored []byte) (Identity, error) {
	var s sealed
	if err := json.Unmarshal(stored, &s); err != nil {
		return Identity{}, fmt.Errorf("the cluster identity stored in etcd at %s is not readable: %w", EtcdKey, err)
	}
	if s.Version != sealVersion {
		return Identity{}, fmt.Errorf("the cluster identity stored in etcd at %s is sealed as %q, which this nodus-server does not know", EtcdKey, s.Version)
	}
	aead, err := newAEAD(clusterKey, s.Salt)
	if err != nil {
		return Identity{}, err
	}
	if len(s.Nonce) != aead.NonceSize() {
		return Identity{}, ErrWrongKey
	}
	plain, err := aead.Open(nil, s.Nonce, s.Data, []byte(sealVersion))
	if err != nil {
		return Identity{}, ErrWrongKey
	}
	var id Identity
	if err := json.Unmarshal(plain, &id); err != nil {
		return Identity{}, fmt.Errorf("the opened cluster identity: %w", err)
	}
	return id, id.complete()
}

func newAEAD(clusterKey, salt []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, clusterKey, salt, sealVersion, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Load returns the cluster's identity from etcd. On an etcd that has none,
// it stores propose's (the first replica's: new keys, or those a single
// server made before it had a cluster identity) unless another replica
// stored its own meanwhile, which then wins. created says whether this
// call stored it. Nothing is written when the stored identity does not
// open with clusterKey.
func Load(ctx context.Context, kv clientv3.KV, clusterKey []byte, propose func() (Identity, error)) (id Identity, created bool, err error) {
	resp, err := kv.Get(ctx, EtcdKey)
	if err != nil {
		return Identity{}, false, err
	}
	if len(resp.Kvs) == 1 {
		id, err := Open(clusterKey, resp.Kvs[0].Value)
		return id, false, err
	}
	proposed, err := propose()
	if err != nil {
		return Identity{}, false, err
	}
	data, err := Seal(clusterKey, proposed)
	if err != nil {
		return Identity{}, false, err
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(EtcdKey), "=", 0)).
		Then(clientv3.OpPut(EtcdKey, string(data))).
		Else(clientv3.OpGet(EtcdKey)).
		Commit()
	if err != nil {
		return Identity{}, false, err
	}
	if txn.Succeeded {
		return proposed, true, nil
	}
	winner := txn.Responses[0].GetResponseRange().Kvs
	if len(winner) != 1 {
		return Identity{}, false, fmt.Errorf("the cluster identity at %s was stored and removed meanwhile", EtcdKey)
	}
	id, err = Open(clusterKey, winner[0].Value)
	return id, false, err
}

// Reseal seals the stored identity again with newKey, which must open it
// from then on; oldKey must open it now. The identity itself (the CA and
// the SSH user CA) stays: every credential keeps working.
func Reseal(ctx context.Context, kv clientv3.KV, oldKey, newKey []byte) error {
	resp, err := kv.Get(ctx, EtcdKey)
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 {
		return fmt.Errorf("etcd holds no cluster identity at %s to reseal", EtcdKey)
	}
	id, err := Open(oldKey, resp.Kvs[0].Value)
	if err != nil {
		return err
	}
	data, err := Seal(newKey, id)
	if err != nil {
		return err
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(EtcdKey), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(EtcdKey, string(data))).
		Commit()
	if err != nil {
		return err
	}
	if !txn.Succeeded {
		return errors.New("the cluster identity changed while it was being resealed: run the rotation again")
	}
	return nil
}
