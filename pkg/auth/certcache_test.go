package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/nodus-dev/nodus/pkg/pki"
)

// countingVerifier counts the verifications the cache lets through.
type countingVerifier struct {
	next  authenticator.Request
	calls int
}

func (v *countingVerifier) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	v.calls++
	return v.next.AuthenticateRequest(req)
}

func requestWithCert(t *testing.T, ca *pki.CA, user string) *http.Request {
	t.Helper()
	pair, err := ca.IssueClient(user, []string{"team"})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pair.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://nodus/apis", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	return req
}

// certificateAuthenticator is NewAuthenticator's certificate half, its
// verifications counted.
func certificateAuthenticator(roots *x509.CertPool) (*certCache, *countingVerifier) {
	v := &countingVerifier{next: newX509(roots)}
	return newCertCache(v), v
}

// certificateAuthenticatorOfCA is certificateAuthenticator trusting a new CA.
func certificateAuthenticatorOfCA(t *testing.T) (*pki.CA, *certCache, *countingVerifier) {
	t.Helper()
	ca, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cache, verifier := certificateAuthenticator(roots)
	return ca, cache, verifier
}

func TestCertCacheVerifiesEachCertificateOnce(t *testing.T) {
	ca, cache, verifier := certificateAuthenticatorOfCA(t)

	alice := requestWithCert(t, ca, "alice")
	for range 3 {
		resp, ok, err := cache.AuthenticateRequest(alice)
		if err != nil || !ok || resp.User.GetName() != "alice" {
			t.Fatalf("alice: %v %v %v", resp, ok, err)
		}
		// A filter that changes the user must not change the cache.
		resp.User.(interface{ GetGroups() []string }).GetGroups()[0] = "changed"
	}
	if verifier.calls != 1 {
		t.Errorf("one certificate verified %d times", verifier.calls)
	}
	if resp, _, _ := cache.AuthenticateRequest(alice); resp.User.GetGroups()[0] != "team" {
		t.Errorf("the cached user was changed through an answer: %v", resp.User.GetGroups())
	}

	// Another certificate of the same user is verified on its own.
	if _, ok, err := cache.AuthenticateRequest(requestWithCert(t, ca, "alice")); !ok || err != nil || verifier.calls != 2 {
		t.Errorf("a second certificate: %v %v, %d verifications", ok, err, verifier.calls)
	}

	// Past its expiry a certificate is verified again, and the verifier
	// (with its own clock) decides.
	cache.now = func() time.Time { return time.Now().Add(10 * 365 * 24 * time.Hour) }
	if _, _, _ = cache.AuthenticateRequest(alice); verifier.calls != 3 {
		t.Errorf("an expired certificate was answered from the cache: %d verifications", verifier.calls)
	}

	// A certificate of another CA is never remembered.
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	stranger := requestWithCert(t, other, "mallory")
	for range 2 {
		if _, ok, _ := cache.AuthenticateRequest(stranger); ok {
			t.Fatal("a certificate of another CA authenticated")
		}
	}
	if verifier.calls != 5 {
		t.Errorf("a refused certificate must be verified every time: %d verifications", verifier.calls)
	}
}

// TestACertificateIsOneEntryWhateverComesBesideIt: the cache is keyed by
// the certificate; a chain with certificates added to it is the same
// entry, not one more per request (which cleared the whole cache every
// 50,000, and every agent's next request was verified again).
func TestACertificateIsOneEntryWhateverComesBesideIt(t *testing.T) {
	ca, cache, verifier := certificateAuthenticatorOfCA(t)
	agent := requestWithCert(t, ca, "nodus:node:gpu-001")
	padding := requestWithCert(t, ca, "padding").TLS.PeerCertificates[0]
	for i := range 5 {
		chain := []*x509.Certificate{agent.TLS.PeerCertificates[0]}
		for range i {
			chain = append(chain, padding)
		}
		req := agent.Clone(agent.Context())
		req.TLS = &tls.ConnectionState{PeerCertificates: chain}
		if resp, ok, err := cache.AuthenticateRequest(req); !ok || err != nil || resp.User.GetName() != "nodus:node:gpu-001" {
			t.Fatalf("the agent's certificate with %d more: %v %v", i, ok, err)
		}
	}
	if verifier.calls != 1 || len(cache.known) != 1 {
		t.Errorf("one certificate, sent with more beside it: %d verifications, %d entries", verifier.calls, len(cache.known))
	}

	// A full cache makes room by a tenth, not by emptying.
	for i := range maxCachedCerts - 1 {
		cache.known[[32]byte{byte(i), byte(i >> 8), byte(i >> 16), 1}] = cachedCert{notAfter: time.Now().Add(time.Hour)}
	}
	if _, ok, err := cache.AuthenticateRequest(requestWithCert(t, ca, "alice")); !ok || err != nil {
		t.Fatalf("alice: %v %v", ok, err)
	}
	if n := len(cache.known); n < maxCachedCerts*8/10 || n > maxCachedCerts*9/10+1 {
		t.Errorf("a full cache made room down to %d entries", n)
	}
}
