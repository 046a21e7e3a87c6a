package agent

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodus-dev/nodus/pkg/pki"
)

// TestCAHashPinsExactlyOneCertificate: a man in the middle serves the real
// CA followed by its own at /ca.crt, and a serving certificate of its own
// CA. The pin matches the first certificate, but only that one is trusted,
// so the enrollment token is never sent to it.
func TestCAHashPinsExactlyOneCertificate(t *testing.T) {
	dir := t.TempDir()
	real, err := pki.LoadOrCreateCA(filepath.Join(dir, "real"), "nodus")
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := pki.LoadOrCreateCA(filepath.Join(dir, "attacker"), "nodus")
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := attacker.LoadOrCreateServing(filepath.Join(dir, "attacker"), "serving", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	var tokens atomic.Int32
	mitm := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ca.crt" {
			_, _ = w.Write(append(append([]byte{}, real.CertPEM...), attacker.CertPEM...))
			return
		}
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			tokens.Add(1)
		}
		http.Error(w, "no", http.StatusForbidden)
	}))
	mitm.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
	mitm.StartTLS()
	defer mitm.Close()

	_, err = Enroll(context.Background(), EnrollOptions{Server: mitm.URL, Token: "enroll_n1.secret", CAHash: real.Fingerprint(),
		Node: "n1", StateDir: filepath.Join(dir, "state")})
	if err == nil || !strings.Contains(err.Error(), "more than one certificate") {
		t.Fatalf("enrolled through a man in the middle, or refused for another reason: %v", err)
	}
	if n := tokens.Load(); n != 0 {
		t.Fatalf("the enrollment token reached the man in the middle %d times (%v)", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "agent.crt")); err == nil {
		t.Error("a credential was written")
	}
	// A served bundle with the attacker's CA first does not match the pin at all.
	if _, err := trustedCA(context.Background(), EnrollOptions{Server: mitm.URL, CAHash: attacker.Fingerprint() + "0"}, []string{mitm.URL}); err == nil ||
		!strings.Contains(err.Error(), "refusing to enroll") {
		t.Errorf("a wrong pin: %v", err)
	}
}
