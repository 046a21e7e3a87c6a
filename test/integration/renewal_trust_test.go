package integration

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/pki"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestARenewedCertificateOfAnotherCAIsNotKept: nodusd writes the
// certificate a renewal answers into its state directory, and presents it
// from then on. One for its own key but issued by another CA (a
// compromised server, or a proxy in between that is) would lock the host
// out at its next connection: it must not replace the certificate the
// server's CA issued. The agent here renews through a proxy that swaps the
// answer's certificate for such a one.
func TestARenewedCertificateOfAnotherCAIsNotKept(t *testing.T) {
	const validity = 12 * time.Second
	s := shortCertificatesServer(t, validity)
	dir := t.TempDir()
	enrollAgent(t, s, "forged", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
	first := certIn(t, dir)
	forged := certificateOfAnotherCA(t, dir, first)

	var swapped atomic.Int32
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if !strings.HasSuffix(req.URL.Path, "/renew") {
			return false
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Del("Accept-Encoding")
		answer := httptest.NewRecorder()
		forward.ServeHTTP(answer, req)
		var body map[string]any
		if err := json.Unmarshal(answer.Body.Bytes(), &body); err != nil || answer.Code != http.StatusCreated && answer.Code != http.StatusOK {
			// The agent retries a refused renewal a second later: the
			// test may end, and cancel it, while that one is in flight.
			if req.Context().Err() == nil {
				t.Errorf("the server's renewal answer: %d %v %s", answer.Code, err, answer.Body.Bytes())
			}
			return false
		}
		body["certificate"] = string(forged)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.Code)
		_ = json.NewEncoder(w).Encode(body)
		swapped.Add(1)
		return true
	})
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})

	// Two thirds into 12 s, the first renewal.
	if err := testfleet.Eventually(ctx(t), validity, func(context.Context) (bool, error) { return swapped.Load() > 0, nil }); err != nil {
		t.Fatal("the agent did not try to renew its certificate")
	}
	time.Sleep(time.Second)
	if now := certIn(t, dir); now.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Errorf("the agent kept a certificate of another CA (issuer %q), in place of the server CA's", now.Issuer.CommonName)
	}
}

// certificateOfAnotherCA is a certificate for the key of the agent in dir,
// with like's subject and a longer validity, issued by a CA of its own.
func certificateOfAnotherCA(t *testing.T, dir string, like *x509.Certificate) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "agent.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("agent.key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := pki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := rogue.SignCSR(csr, like.Subject, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return forged
}
