package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	nodereg "github.com/nodus-dev/nodus/pkg/registry/node"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnEnrollmentWhoseAnswerWasLostIsAnsweredAgain: a proxy passes an
// enrollment to the server and loses its answer. The token is used up
// then; the agent that used it (its key) must still get its credential —
// by asking again at once, or by a `nodusd enroll` run again later on the
// same state directory — at the generation that enrollment gave the node,
// and nobody else may get anything from the used token.
func TestAnEnrollmentWhoseAnswerWasLostIsAnsweredAgain(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}

	var enrolls, lost atomic.Int32
	loseAll := atomic.Bool{}
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if !strings.HasSuffix(req.URL.Path, "/enroll") {
				return false
			}
			if enrolls.Add(1) > 1 && !loseAll.Load() {
				return false
			}
			lost.Add(1)
			forward.ServeHTTP(httptest.NewRecorder(), req) // the server enrolls…
			panic(http.ErrAbortHandler)                    // …and the answer is lost
		})
	// The agent trusts the proxy it talks to, and the server's CA, which
	// signs its certificate: a bundle, as --ca-file takes.
	proxyCA := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(proxyCA, append(append([]byte(nil), proxy.CAData...), s.Config.CAData...), 0o600); err != nil {
		t.Fatal(err)
	}
	throughProxy := func(ctx context.Context, tok *nodusv1.EnrollmentToken, node, dir string) (int64, error) {
		return agent.Enroll(ctx, agent.EnrollOptions{Server: proxy.Host, Token: tok.Status.Token, CAFile: proxyCA, Node: node, StateDir: dir})
	}
	direct := func(tok *nodusv1.EnrollmentToken, node, dir string) (int64, error) {
		return agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: tok.Status.Token, CAHash: tok.Status.CAFingerprint, Node: node, StateDir: dir})
	}

	t.Run("asked again at once", func(t *testing.T) {
		tok := issueToken(t, s, "first", spec)
		dir := t.TempDir()
		gen, err := throughProxy(ctx(t), tok, "gpu-001", dir)
		if err != nil || gen != 1 {
			t.Fatalf("an enrollment whose first answer was lost: generation %d, %v (%d requests, %d answers lost)", gen, err, enrolls.Load(), lost.Load())
		}
		if enrolls.Load() != 2 || lost.Load() != 1 {
			t.Errorf("%d enrollment requests, %d answers lost; want 2 and 1", enrolls.Load(), lost.Load())
		}
		enrolledOnce(t, s, tok.Name, "gpu-001", dir, 1)
		if _, err := os.Stat(filepath.Join(dir, "enroll.key")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the pending key is left behind an enrollment that finished: %v", err)
		}
	})

	t.Run("asked again by the next nodusd enroll", func(t *testing.T) {
		loseAll.Store(true)
		tok := issueToken(t, s, "second", spec)
		dir := t.TempDir()
		short, cancel := context.WithTimeout(ctx(t), 2500*time.Millisecond)
		defer cancel()
		if _, err := throughProxy(short, tok, "gpu-002", dir); err == nil {
			t.Fatal("an enrollment none of whose answers arrived reported success")
		}
		if _, err := os.Stat(filepath.Join(dir, "agent.crt")); err == nil {
			t.Fatal("a credential was written without an answer")
		}
		pending, err := os.ReadFile(filepath.Join(dir, "enroll.key"))
		if err != nil {
			t.Fatalf("the key the token was used with is not kept: %v", err)
		}
		gen, err := direct(tok, "gpu-002", dir)
		if err != nil || gen != 1 {
			t.Fatalf("nodusd enroll run again after the answers were lost: generation %d, %v", gen, err)
		}
		enrolledOnce(t, s, tok.Name, "gpu-002", dir, 1)
		if key, _ := os.ReadFile(filepath.Join(dir, "agent.key")); string(key) != string(pending) {
			t.Error("the credential is not for the key the token was used with")
		}
	})

	t.Run("nobody else gets anything from a used token", func(t *testing.T) {
		tok := issueToken(t, s, "third", spec)
		real := t.TempDir()
		if _, err := direct(tok, "gpu-003", real); err != nil {
			t.Fatal(err)
		}
		// Another host (another key) with the stolen token, for the same
		// node and for another.
		for _, node := range []string{"gpu-003", "gpu-009"} {
			if _, err := direct(tok, node, t.TempDir()); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonEnrollmentTokenUsed)) {
				t.Errorf("another key with the used token, for %s: %v, want 403 %s", node, err, apierror.ReasonEnrollmentTokenUsed)
			}
		}
		// The agent's own key, for another node.
		if _, err := direct(tok, "gpu-009", withPendingKey(t, real)); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonEnrollmentTokenUsed)) {
			t.Errorf("the enrolled key with the used token, for another node: %v", err)
		}
		if _, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-009", metav1.GetOptions{}); err == nil {
			t.Error("a used token created a node")
		}
		enrolledOnce(t, s, tok.Name, "gpu-003", real, 1)

		// Once the node is enrolled again, the old token's key gets no
		// certificate: a credential never comes back.
		again := issueToken(t, s, "third-again", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "gpu-003"})
		if gen, err := direct(again, "gpu-003", t.TempDir()); err != nil || gen != 2 {
			t.Fatalf("enrolling gpu-003 again: %d %v", gen, err)
		}
		if _, err := direct(tok, "gpu-003", withPendingKey(t, real)); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonEnrollmentTokenUsed)) {
			t.Errorf("the old token's key after the node was enrolled again: %v", err)
		}
		if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-003", metav1.GetOptions{}); err != nil || n.Status.AgentGeneration != 2 {
			t.Errorf("gpu-003 after the refusals: %v generation %d, want 2", err, n.Status.AgentGeneration)
		}
	})

	// An enrollment cut short inside the server (the token used, nothing
	// more, or the node created and no generation raised) leaves the
	// token's record as the server writes it; an operator writes it here.
	t.Run("an enrollment cut short is finished", func(t *testing.T) {
		cutShort := func(name, node string) (*nodusv1.EnrollmentToken, string) {
			tok := issueToken(t, s, name, spec)
			dir := t.TempDir()
			key := newPendingKey(t, dir)
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			used := tok.DeepCopy()
			used.Status = nodusv1.EnrollmentTokenStatus{TokenHash: tok.Status.TokenHash, UsedBy: node, UsedAt: &now, AgentKeyFingerprint: key}
			if _, err := s.Client.NodusV1().EnrollmentTokens().UpdateStatus(ctx(t), used, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return tok, dir
		}
		tok, dir := cutShort("cut-before-the-node", "gpu-005")
		if gen, err := direct(tok, "gpu-005", dir); err != nil || gen != 1 {
			t.Fatalf("an enrollment cut short before its node was created: %d %v", gen, err)
		}
		enrolledOnce(t, s, tok.Name, "gpu-005", dir, 1)

		tok, dir = cutShort("cut-after-the-node", "gpu-006")
		created := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-006", Annotations: map[string]string{nodereg.AnnotationEnrollmentTokenUID: string(tok.UID)}},
			Spec: nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}}
		if _, err := s.Client.NodusV1().Nodes().Create(ctx(t), created, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if gen, err := direct(tok, "gpu-006", dir); err != nil || gen != 1 {
			t.Fatalf("an enrollment cut short after its node was created: %d %v", gen, err)
		}
		enrolledOnce(t, s, tok.Name, "gpu-006", dir, 1)

		// A node the token did not create stays another's: a token without
		// a node name takes none over, cut short or not.
		tok, dir = cutShort("cut-on-another-node", "gpu-007")
		if _, err := s.Client.NodusV1().Nodes().Create(ctx(t), &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-007"},
			Spec: nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := direct(tok, "gpu-007", dir); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonNodeAlreadyEnrolled)) {
			t.Errorf("a used token finishing on a node it did not create: %v, want 403 %s", err, apierror.ReasonNodeAlreadyEnrolled)
		}
		if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-007", metav1.GetOptions{}); err != nil || n.Status.AgentGeneration != 0 {
			t.Errorf("gpu-007 after the refusal: %v generation %d, want 0", err, n.Status.AgentGeneration)
		}
	})

	// A token for a node that exists, used and bound to the node's next
	// generation, cut short before it raised it: asked again it raises it;
	// but once another token enrolled the node meanwhile, it gets nothing.
	t.Run("a bound enrollment cut short raises once, and never after another", func(t *testing.T) {
		bound := func(tokenName, node string) (*nodusv1.EnrollmentToken, string) {
			n, err := s.Client.NodusV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tok := issueToken(t, s, tokenName, nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: node})
			dir := t.TempDir()
			key := newPendingKey(t, dir)
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			used := tok.DeepCopy()
			used.Status = nodusv1.EnrollmentTokenStatus{TokenHash: tok.Status.TokenHash, UsedBy: node, UsedAt: &now, AgentKeyFingerprint: key,
				NodeUID: n.UID, AgentGeneration: n.Status.AgentGeneration + 1}
			if _, err := s.Client.NodusV1().EnrollmentTokens().UpdateStatus(ctx(t), used, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return tok, dir
		}
		for _, node := range []string{"gpu-010", "gpu-011"} {
			if _, err := direct(issueToken(t, s, node+"-first", spec), node, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
		tok, dir := bound("bound-gpu-010", "gpu-010")
		if gen, err := direct(tok, "gpu-010", dir); err != nil || gen != 2 {
			t.Fatalf("a bound enrollment cut short, asked again: %d %v", gen, err)
		}
		enrolledOnce(t, s, tok.Name, "gpu-010", dir, 2)

		late, lateDir := bound("bound-gpu-011", "gpu-011")
		other := t.TempDir()
		if gen, err := direct(issueToken(t, s, "gpu-011-again", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "gpu-011"}), "gpu-011", other); err != nil || gen != 2 {
			t.Fatalf("enrolling gpu-011 again: %d %v", gen, err)
		}
		if _, err := direct(late, "gpu-011", lateDir); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonEnrollmentTokenUsed)) {
			t.Errorf("a bound enrollment cut short, asked again after another token enrolled the node: %v, want 403 %s", err, apierror.ReasonEnrollmentTokenUsed)
		}
		enrolledOnce(t, s, "gpu-011-again", "gpu-011", other, 2)
	})
}

// enrolledOnce checks that the agent in dir holds a working credential of
// node at generation gen, that the node's generation is gen (raised once,
// not for every request), and that the token records the enrollment.
func enrolledOnce(t *testing.T, s *testserver.Server, token, node, dir string, gen int64) {
	t.Helper()
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
	if err != nil || n.Status.AgentGeneration != gen {
		t.Fatalf("node %s: %v, generation %d, want %d", node, err, n.Status.AgentGeneration, gen)
	}
	cfg := &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData,
		CertFile: filepath.Join(dir, "agent.crt"), KeyFile: filepath.Join(dir, "agent.key")}}
	if r := do(t, cfg, "GET", "/apis/nodus.dev/v1/nodes/"+node, "", nil); r.code != http.StatusOK {
		t.Errorf("the credential enrolled for %s: %d %s", node, r.code, r.body)
	}
	tok, err := s.Client.NodusV1().EnrollmentTokens().Get(ctx(t), token, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "agent.key"))
	if err != nil {
		t.Fatal(err)
	}
	if st := tok.Status; st.UsedBy != node || st.AgentKeyFingerprint != keyFingerprint(t, keyPEM) || st.NodeUID != n.UID || st.AgentGeneration != gen {
		t.Errorf("token %s records %+v; want node %s (%s) at generation %d with the agent's key", token, st, node, n.UID, gen)
	}
}

// withPendingKey is a new state directory whose pending enrollment key is
// the key of the agent enrolled in dir.
func withPendingKey(t *testing.T, dir string) string {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, "agent.key"))
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "enroll.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	return other
}

// newPendingKey writes a pending enrollment key into dir and returns its
// fingerprint.
func newPendingKey(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "enroll.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFingerprint(t, keyPEM)
}

// keyFingerprint is the sha256:HEX of a PEM EC private key's public key.
func keyFingerprint(t *testing.T, keyPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("no PEM key")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}
