package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/clusteridentity"
	"github.com/nodus-dev/nodus/pkg/pki"
	"github.com/nodus-dev/nodus/pkg/sshca"
)

// identity is the cluster's signing keys, as this replica uses them.
type identity struct {
	ca    *pki.CA
	sshCA *sshca.CA
	// created says this replica stored the identity: the cluster's first.
	created bool
}

// loadIdentity opens the cluster identity from etcd with the cluster key,
// or stores this replica's when etcd has none yet: the CA and SSH user CA
// a single server made before (so that its credentials keep working), or
// new ones. Nothing is written, in etcd or DIR, when the key is wrong.
func (o *Options) loadIdentity(ctx context.Context, st *storage) (*identity, error) {
	key, err := o.clusterKeyFor(ctx, st)
	if err != nil {
		return nil, err
	}
	pkiDir := o.pkiDir()
	stored, created, err := clusteridentity.Load(ctx, st.client, key, func() (clusteridentity.Identity, error) { return localIdentity(pkiDir) })
	if errors.Is(err, clusteridentity.ErrWrongKey) {
		return nil, fmt.Errorf("%w (this replica read %s)", err, o.clusterKeyPath())
	}
	if err != nil {
		return nil, fmt.Errorf("cluster identity: %w", err)
	}
	ca, err := pki.ParseCA(stored.CACert, stored.CAKey)
	if err != nil {
		return nil, fmt.Errorf("the cluster CA: %w", err)
	}
	sshCA, err := sshca.Parse(stored.SSHUserCAKey)
	if err != nil {
		return nil, fmt.Errorf("the cluster's SSH user CA: %w", err)
	}
	if err := writeLocalIdentity(pkiDir, ca, sshCA); err != nil {
		return nil, err
	}
	return &identity{ca: ca, sshCA: sshCA, created: created}, nil
}

// clusterKeyFor is clusterKey, made only while st holds no identity: a
// DIR/cluster.key that went missing is not replaced by a new key, which
// would open nothing of what etcd holds.
func (o *Options) clusterKeyFor(ctx context.Context, st *storage) ([]byte, error) {
	if o.ClusterKeyFile == "" {
		if _, err := os.Stat(o.clusterKeyPath()); errors.Is(err, os.ErrNotExist) {
			resp, err := st.client.Get(ctx, clusteridentity.EtcdKey, clientv3.WithCountOnly())
			if err != nil {
				return nil, fmt.Errorf("cluster identity: %w", err)
			}
			if resp.Count > 0 {
				return nil, fmt.Errorf("%s is missing, and etcd holds the cluster identity sealed with the key it held: restore the file (a copy of it, or the key you keep elsewhere); a new key would open nothing", o.clusterKeyPath())
			}
		}
	}
	return o.clusterKey()
}

// clusterKey reads --cluster-key-file; with embedded etcd and no flag,
// DIR/cluster.key, made on first start.
func (o *Options) clusterKey() ([]byte, error) {
	if o.ClusterKeyFile != "" {
		return clusteridentity.ReadKeyFile(o.ClusterKeyFile)
	}
	return clusteridentity.EnsureKeyFile(o.clusterKeyPath())
}

func (o *Options) clusterKeyPath() string {
	if o.ClusterKeyFile != "" {
		return o.ClusterKeyFile
	}
	return filepath.Join(o.DataDir, "cluster.key")
}

func (o *Options) pkiDir() string { return filepath.Join(o.DataDir, "pki") }

// sshCAFile is where each replica keeps its copy of the SSH user CA key.
const sshCAFile = "ssh-user-ca"

// localIdentity is the CA and SSH user CA of DIR/pki, or new ones where
// they are missing; nothing is written.
func localIdentity(pkiDir string) (clusteridentity.Identity, error) {
	ca, err := pki.LoadCA(pkiDir)
	if errors.Is(err, os.ErrNotExist) {
		// A certificate without its key is a CA clients may trust whose
		// key was lost: a new CA would replace it, unasked.
		if _, statErr := os.Stat(filepath.Join(pkiDir, "ca.crt")); statErr == nil {
			return clusteridentity.Identity{}, fmt.Errorf("%s has no ca.key beside its ca.crt: restore the key, or remove ca.crt to make a new CA (every credential the old one signed stops working)", pkiDir)
		}
		ca, err = pki.NewCA("nodus-ca")
	}
	if err != nil {
		return clusteridentity.Identity{}, fmt.Errorf("certificate authority: %w", err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return clusteridentity.Identity{}, err
	}
	sshKey, err := os.ReadFile(filepath.Join(pkiDir, sshCAFile))
	if errors.Is(err, os.ErrNotExist) {
		sshKey, err = sshca.NewKey()
	}
	if err != nil {
		return clusteridentity.Identity{}, fmt.Errorf("SSH user CA: %w", err)
	}
	return clusteridentity.Identity{CACert: ca.CertPEM, CAKey: caKey, SSHUserCAKey: sshKey}, nil
}

// writeLocalIdentity keeps this replica's copy of the cluster's keys in
// DIR/pki, replacing an earlier CA of its own.
func writeLocalIdentity(pkiDir string, ca *pki.CA, sshCA *sshca.CA) error {
	if current, err := pki.LoadCA(pkiDir); err != nil || !bytes.Equal(current.CertPEM, ca.CertPEM) {
		if err := ca.WriteFiles(pkiDir); err != nil {
			return fmt.Errorf("write the cluster CA to %s: %w", pkiDir, err)
		}
	}
	path := filepath.Join(pkiDir, sshCAFile)
	if current, err := os.ReadFile(path); err != nil || !bytes.Equal(current, sshCA.KeyPEM()) {
		if err := sshca.WriteKey(path, sshCA.KeyPEM()); err != nil {
			return fmt.Errorf("write the SSH user CA to %s: %w", path, err)
		}
	}
	return nil
}

// replicaID is this replica's name across restarts, DIR/replica-id: a
// restarted replica's in-flight requests are known cut at once.
func (o *Options) replicaID() (string, error) {
	path := filepath.Join(o.DataDir, "replica-id")
	data, err := os.ReadFile(path)
	if err == nil && len(bytes.TrimSpace(data)) > 0 {
		return string(bytes.TrimSpace(data)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := uuid.NewString()
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return id, nil
}

// RotateClusterKey seals the cluster identity in etcd again with the key
// in newKeyFile; --cluster-key-file must open it now. Replicas that run
// keep running; each needs the new file before it starts again.
func (o *Options) RotateClusterKey(ctx context.Context, newKeyFile string) error {
	if err := o.Validate(); err != nil {
		return err
	}
	newKey, err := clusteridentity.ReadKeyFile(newKeyFile)
	if err != nil {
		return err
	}
	oldKey, err := o.clusterKey()
	if err != nil {
		return err
	}
	st, err := o.openStorage(ctx)
	if err != nil {
		return err
	}
	defer st.close(context.Background())
	if err := clusteridentity.Reseal(ctx, st.client, oldKey, newKey); err != nil {
		return fmt.Errorf("rotate the cluster key: %w", err)
	}
	if o.ClusterKeyFile == "" {
		// The key a plain start reads: left as it was, the next start
		// would not open the identity it just resealed.
		if err := atomicfile.Write(o.clusterKeyPath(), append(bytes.Clone(newKey), '\n'), 0o600); err != nil {
			return fmt.Errorf("the identity is sealed with %s now, but writing it to %s failed (copy it there before the next start): %w", newKeyFile, o.clusterKeyPath(), err)
		}
	}
	return nil
}
