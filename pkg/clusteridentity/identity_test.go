package clusteridentity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

var sample = Identity{CACert: []byte("ca cert"), CAKey: []byte("ca key"), SSHUserCAKey: []byte("ssh key")}

func TestSealOpens(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	data, err := Seal(key, sample)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("ca key")) || bytes.Contains(data, []byte("ssh key")) {
		t.Fatalf("the sealed identity shows its keys: %s", data)
	}
	got, err := Open(key, data)
	if err != nil || !bytes.Equal(got.CAKey, sample.CAKey) || !bytes.Equal(got.SSHUserCAKey, sample.SSHUserCAKey) || !bytes.Equal(got.CACert, sample.CACert) {
		t.Fatalf("Open(Seal) = %+v, %v", got, err)
	}
	again, _ := Seal(key, sample)
	if bytes.Equal(again, data) {
		t.Error("two seals are the same bytes: salt and nonce must be new each time")
	}
}

func TestOpenRefusesAnotherKeyOrAlteredData(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	data, err := Seal(key, sample)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open([]byte(strings.Repeat("x", 32)), data); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another key: %v, want ErrWrongKey", err)
	}
	var s sealed
	_ = json.Unmarshal(data, &s)
	s.Data[0] ^= 1
	altered, _ := json.Marshal(s)
	if _, err := Open(key, altered); !errors.Is(err, ErrWrongKey) {
		t.Errorf("altered data: %v, want ErrWrongKey", err)
	}
	s.Data[0] ^= 1
	s.Version = "nodus-identity-v9"
	future, _ := json.Marshal(s)
	if _, err := Open(key, future); err == nil || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("an unknown seal version: %v", err)
	}
	if _, err := Open(key, []byte("{")); err == nil || errors.Is(err, ErrWrongKey) {
		t.Errorf("unreadable data: %v", err)
	}
	if _, err := Seal(key, Identity{CACert: []byte("x")}); err == nil {
		t.Error("an identity without keys was sealed")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cluster.key")
	key, err := EnsureKeyFile(path)
	if err != nil || len(key) != 64 {
		t.Fatalf("EnsureKeyFile: %q %v", key, err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("a new key file has mode %s", info.Mode().Perm())
	}
	if again, err := EnsureKeyFile(path); err != nil || !bytes.Equal(again, key) {
		t.Errorf("EnsureKeyFile made a new key over an existing one: %v", err)
	}
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("secret\n"), 0o600)
	if _, err := ReadKeyFile(short); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a 6-byte key: %v", err)
	}
	open := filepath.Join(dir, "open")
	_ = os.WriteFile(open, bytes.Repeat([]byte("a"), 40), 0o644)
	if _, err := ReadKeyFile(open); err == nil || !strings.Contains(err.Error(), "chmod o-rwx") {
		t.Errorf("a world-readable key: %v", err)
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing key file was read")
	}
}

// Replicas starting at once on an empty etcd agree on one identity, and
// one with another key reads nothing and writes nothing.
func TestLoadAgreesOnOneIdentity(t *testing.T) {
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	ctx := context.Background()
	key := []byte(strings.Repeat("c", 40))

	const replicas = 5
	got := make([]Identity, replicas)
	created := make([]bool, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := Identity{CACert: []byte{byte('0' + i)}, CAKey: []byte("k"), SSHUserCAKey: []byte("s")}
			got[i], created[i], errs[i] = Load(ctx, client, key, func() (Identity, error) { return own, nil })
		}()
	}
	wg.Wait()
	makers := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i].CACert, got[0].CACert) {
			t.Errorf("replica %d has CA %q, replica 0 %q", i, got[i].CACert, got[0].CACert)
		}
		if created[i] {
			makers++
		}
	}
	if makers != 1 {
		t.Errorf("%d replicas say they stored the identity, want 1", makers)
	}

	before, _ := client.Get(ctx, EtcdKey)
	proposed := false
	_, _, err = Load(ctx, client, []byte(strings.Repeat("w", 40)), func() (Identity, error) { proposed = true; return sample, nil })
	if !errors.Is(err, ErrWrongKey) {
		t.Errorf("a replica with another key: %v, want ErrWrongKey", err)
	}
	after, _ := client.Get(ctx, EtcdKey)
	if proposed || after.Kvs[0].ModRevision != before.Kvs[0].ModRevision || !bytes.Equal(after.Kvs[0].Value, before.Kvs[0].Value) {
		t.Error("a replica with another key changed the stored identity")
	}

	// A rotation: the new key opens the same identity, the old one no more.
	newKey := []byte(strings.Repeat("n", 40))
	if err := Reseal(ctx, client, []byte(strings.Repeat("w", 40)), newKey); !errors.Is(err, ErrWrongKey) {
		t.Errorf("a reseal with a wrong current key: %v", err)
	}
	if err := Reseal(ctx, client, key, newKey); err != nil {
		t.Fatal(err)
	}
	resealed, _, err := Load(ctx, client, newKey, nil)
	if err != nil || !bytes.Equal(resealed.CACert, got[0].CACert) {
		t.Errorf("the new key opens %q, %v; want the same CA %q", resealed.CACert, err, got[0].CACert)
	}
	if _, _, err := Load(ctx, client, key, nil); !errors.Is(err, ErrWrongKey) {
		t.Errorf("the old key after the rotation: %v", err)
	}
}
