package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestACertificateNearItsEndIsIssuedAnew: a client certificate was loaded
// as it was for as long as its file lasted, expired after a year, and the
// server that presented it could no longer reach its own etcd (nor its
// operator log in with admin.kubeconfig). Loaded within its last 30 days,
// or expired, it is issued anew, as a serving certificate is; one that
// lasts is kept.
func TestACertificateNearItsEndIsIssuedAnew(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	load := map[string]func(dir string) ([]byte, error){
		"client": func(dir string) ([]byte, error) {
			p, err := ca.LoadOrCreateClient(dir, "client", "nodus-server", []string{"g"})
			return p.CertPEM, err
		},
		"serving": func(dir string) ([]byte, error) {
			certPath, _, err := ca.LoadOrCreateServing(dir, "serving", []string{"localhost"})
			if err != nil {
				return nil, err
			}
			return os.ReadFile(certPath)
		},
	}
	for name, load := range load {
		for _, c := range []struct {
			left    time.Duration
			renewed bool
		}{{-time.Hour, true}, {29 * 24 * time.Hour, true}, {31 * 24 * time.Hour, false}} {
			dir := t.TempDir()
			planted := ca.issueFor(t, name, c.left)
			if err := writePair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), planted); err != nil {
				t.Fatal(err)
			}
			got, err := load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if renewed := !bytes.Equal(got, planted.CertPEM); renewed != c.renewed {
				t.Errorf("a %s certificate with %s left: issued anew %v, want %v", name, c.left, renewed, c.renewed)
			}
			onDisk, _ := os.ReadFile(filepath.Join(dir, name+".crt"))
			cert, err := parseCertificate(onDisk)
			if err != nil || !bytes.Equal(onDisk, got) || (c.renewed && time.Until(cert.NotAfter) < 300*24*time.Hour) {
				t.Errorf("a %s certificate with %s left: on disk %v, valid until %v", name, c.left, err, cert.NotAfter)
			}
		}
	}
}

// issueFor is a certificate of ca for name (its kind and its host) that
// ends left from now.
func (ca *CA) issueFor(t *testing.T, name string, left time.Duration) Pair {
	t.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	pair, err := ca.issue(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := parseCertificate(pair.CertPEM)
	tmpl = cert
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-400*24*time.Hour), time.Now().Add(left)
	block, _ := pem.Decode(pair.KeyPEM)
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := encode(der, key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestACAPairMustBelongTogether: a CA certificate beside another CA's key
// (a write stopped between the two files, a file copied from elsewhere)
// loaded, and signed certificates its certificate did not verify.
func TestACAPairMustBelongTogether(t *testing.T) {
	a, errA := NewCA("a")
	b, errB := NewCA("b")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	keyB, err := b.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(a.CertPEM, keyB); err == nil {
		t.Error("a CA certificate with another CA's key was taken")
	}
	leaf := a.issueFor(t, "client", time.Hour)
	keyA, _ := a.KeyPEM()
	if _, err := ParseCA(leaf.CertPEM, keyA); err == nil {
		t.Error("a certificate that is no CA's was taken for the CA")
	}
	if _, err := ParseCA(a.CertPEM, keyA); err != nil {
		t.Errorf("a CA's own pair: %v", err)
	}
}
