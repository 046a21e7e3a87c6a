package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// endlessBody is a body of n bytes that counts how much of it was read.
type endlessBody struct {
	left, read int64
	sent       *atomic.Int64
}

func (b *endlessBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > b.left {
		n = b.left
	}
	for i := range p[:n] {
		p[i] = 'x'
	}
	b.left -= n
	b.sent.Add(n)
	return int(n), nil
}

// postHuge POSTs n bytes to path as cfg, with or without a Content-Length,
// and returns the answer and how much of the body the client got to send.
func postHuge(t *testing.T, cfg *rest.Config, path string, n int64, withLength bool) (int, int64) {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	body := &endlessBody{left: n, sent: &sent}
	req, _ := http.NewRequestWithContext(ctx(t), "POST", cfg.Host+path, io.NopCloser(body))
	if withLength {
		req.ContentLength = n
	} else {
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: transport, Timeout: time.Minute}).Do(req)
	if err != nil {
		// The server may close the stream before the client is done sending.
		return 0, sent.Load()
	}
	resp.Body.Close()
	return resp.StatusCode, sent.Load()
}

// TestNoCallerCanFillEtcd: a project member who tries to make the server
// store hundreds of megabytes — huge bodies on every kind of endpoint,
// oversized executions, more executions than the project may keep, a new
// Idempotency-Key per request, giant public keys — is refused early, and
// etcd stays about the size it was.
func TestNoCallerCanFillEtcd(t *testing.T) {
	testserver.KeepLogs(t)
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) {
		o.MaxExecutionsPerProject, o.IdempotencyKeysPerCaller = 20, 30
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f := newFleet(t, s)
	f.host(t, "bounded", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lends"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentCfg := enrollAgent(t, s, "reporter", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}, t.TempDir())
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	dbSize := func() int64 {
		st, err := etcd.Status(ctx(t), etcd.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.DbSize
	}
	before := dbSize()
	var attempted int64

	// 1. Huge bodies: refused before they are read.
	const huge = 300 << 20
	for _, target := range []struct {
		what string
		cfg  *rest.Config
		path string
	}{
		{"an execution", f.member, "/apis/nodus.dev/v1/namespaces/acme/executions"},
		{"an SSH certificate request", f.member, "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/bounded/ssh-certificate"},
		{"a release", f.admin, "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/bounded/release-capacity"},
		{"a lend", f.admin, "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/bounded/lend"},
		{"a heartbeat", agentCfg, "/apis/nodus.dev/v1/nodes/reporter/heartbeat"},
		{"a project (as a member)", f.member, "/apis/nodus.dev/v1/projects"},
	} {
		for _, withLength := range []bool{true, false} {
			code, sent := postHuge(t, target.cfg, target.path, huge, withLength)
			t.Logf("%s, length given %v: HTTP %d after %d KiB sent", target.what, withLength, code, sent>>10)
			attempted += huge
			if code != 0 && code != http.StatusRequestEntityTooLarge && code != http.StatusForbidden {
				t.Errorf("%s of 300 MiB (length given: %v): HTTP %d", target.what, withLength, code)
			}
			if sent > 8<<20 {
				t.Errorf("%s of 300 MiB (length given: %v): the server read %d MiB before refusing", target.what, withLength, sent>>20)
			}
		}
	}

	// 2. Executions within the body limit but beyond what one may hold.
	submit := func(mutate func(*nodusv1.Execution)) response {
		e := &nodusv1.Execution{TypeMeta: metav1.TypeMeta{APIVersion: "nodus.dev/v1", Kind: "Execution"},
			ObjectMeta: metav1.ObjectMeta{GenerateName: "job-"},
			Spec:       nodusv1.ExecutionSpec{Pool: "lends", Command: []string{"train"}, MaxRuntimeSeconds: 60}}
		mutate(e)
		body, _ := json.Marshal(e)
		attempted += int64(len(body))
		return do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/executions", "application/json", strings.NewReader(string(body)))
	}
	big := strings.Repeat("x", 70<<10)
	for what, mutate := range map[string]func(*nodusv1.Execution){
		"a 70 KiB command":      func(e *nodusv1.Execution) { e.Spec.Command = []string{"train", big} },
		"70 KiB of environment": func(e *nodusv1.Execution) { e.Spec.Env = []nodusv1.ExecutionEnv{{Name: "BIG", Value: big}} },
		"70 KiB of annotations": func(e *nodusv1.Execution) { e.Annotations = map[string]string{"big": big} },
		"2 MiB of labels and annotations": func(e *nodusv1.Execution) {
			e.Annotations = map[string]string{}
			for i := range 30 {
				e.Annotations[fmt.Sprintf("a%d", i)] = big
			}
		},
	} {
		if r := submit(mutate); r.code != http.StatusUnprocessableEntity && r.code != http.StatusRequestEntityTooLarge {
			t.Errorf("an execution with %s: %d %s", what, r.code, r.body)
		}
	}
	for i := range 20 {
		if r := submit(func(*nodusv1.Execution) {}); r.code != http.StatusCreated {
			t.Fatalf("execution %d of 20: %d %s", i+1, r.code, r.body)
		}
	}
	r := submit(func(*nodusv1.Execution) {})
	if r.code != http.StatusForbidden || envelopeOf(t, r).Reason != apierror.ReasonExecutionLimitReached {
		t.Errorf("the 21st execution: %d %s", r.code, r.body)
	}
	// The bound counts every create and delete answered before: one
	// deleted makes room for exactly one more, at once. (Counted from the
	// watch cache, the create right after a delete could be refused, and
	// the one after it admitted.)
	for round := range 10 {
		held, err := s.Client.NodusV1().Executions("acme").List(ctx(t), metav1.ListOptions{})
		if err != nil || len(held.Items) == 0 {
			t.Fatalf("round %d: executions: %v", round, err)
		}
		if err := s.Client.NodusV1().Executions("acme").Delete(ctx(t), held.Items[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if r := submit(func(*nodusv1.Execution) {}); r.code != http.StatusCreated {
			t.Fatalf("round %d: the create right after a delete: %d %s", round, r.code, r.body)
		}
		if r := submit(func(*nodusv1.Execution) {}); r.code != http.StatusForbidden {
			t.Fatalf("round %d: the 21st again: %d %s", round, r.code, r.body)
		}
	}

	// 3. A new Idempotency-Key per request: a caller keeps 30 answers.
	list, err := s.Client.NodusV1().Executions("acme").List(ctx(t), metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("executions: %v", err)
	}
	cancel := "/apis/nodus.dev/v1/namespaces/acme/executions/" + list.Items[0].Name + "/cancel"
	for i := range 30 {
		if r := do(t, f.member, "POST", cancel, "application/json", strings.NewReader(`{}`), "Idempotency-Key", fmt.Sprintf("k-%d", i)); r.code >= 500 || r.code == http.StatusTooManyRequests {
			t.Fatalf("cancel %d with a new key: %d %s", i, r.code, r.body)
		}
	}
	r = do(t, f.member, "POST", cancel, "application/json", strings.NewReader(`{}`), "Idempotency-Key", "one-too-many")
	if r.code != http.StatusTooManyRequests || envelopeOf(t, r).Reason != apierror.ReasonTooManyIdempotencyKeys {
		t.Errorf("the 31st key: %d %s", r.code, r.body)
	}
	// Through client-go, which waits out any Retry-After of a 429 and
	// sends again, ten times: the refusal must reach the caller, now.
	refused := make(chan error, 1)
	go func() {
		refused <- versioned.NewForConfigOrDie(f.member).NodusV1().RESTClient().Post().AbsPath(cancel).
			SetHeader("Idempotency-Key", "one-too-many").Body([]byte(`{}`)).Do(ctx(t)).Error()
	}()
	select {
	case err := <-refused:
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "keeps 30 answers") {
			t.Errorf("the 31st key through client-go: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the 31st key through client-go got no answer in 20 s: the client waits out a Retry-After it should not have been given")
	}
	if r := do(t, f.member, "POST", cancel, "application/json", strings.NewReader(`{}`), "Idempotency-Key", "k-0"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retry of a kept answer must still be served: %d %s", r.code, r.body)
	}
	if r := do(t, f.viewer, "GET", "/apis/nodus.dev/v1/namespaces/acme/executions", "", nil); r.code != 200 {
		t.Errorf("others are not held back by one caller's bound: %d", r.code)
	}

	// 3b. An agent's and an enrollment token's requests name no project of
	// theirs: under made-up namespaces they are refused, and whatever
	// namespace they name, a caller keeps 30 answers, not 30 per name.
	enroller := bearer(s, issueToken(t, s, "", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}).Status.Token)
	for i := range 40 {
		key := []string{"Idempotency-Key", fmt.Sprintf("a-%d", i)}
		for _, r := range []response{
			do(t, agentCfg, "POST", fmt.Sprintf("/apis/nodus.dev/v1/namespaces/junk-%d/nodes/reporter/heartbeat", i), "application/json", strings.NewReader(`{"agentGeneration":1}`), key...),
			do(t, enroller, "POST", fmt.Sprintf("/apis/nodus.dev/v1/namespaces/junk-%d/nodes/x/enroll", i), "application/json", strings.NewReader(`{}`), key...),
		} {
			if r.code != http.StatusForbidden {
				t.Fatalf("a node path under namespace junk-%d: %d %s", i, r.code, r.body)
			}
		}
		if r := do(t, agentCfg, "POST", fmt.Sprintf("/apis/nodus.dev/v1/namespaces/junk-%d/executions/x/report", i), "application/json",
			strings.NewReader(`{"phase":"running"}`), key...); r.code >= 500 || r.code < 400 {
			t.Fatalf("a report under namespace junk-%d: %d %s", i, r.code, r.body)
		}
	}
	for _, ns := range []string{"..", ".", "UPPER"} {
		if r := do(t, agentCfg, "POST", "/apis/nodus.dev/v1/namespaces/"+ns+"/executions/x/report", "application/json",
			strings.NewReader(`{"phase":"running"}`)); r.code != http.StatusForbidden {
			t.Errorf("a report under namespace %q: %d %s, want 403", ns, r.code, r.body)
		}
	}
	kept, err := etcd.Get(ctx(t), idempotency.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	// The member's 30 above, and at most the agent's 30.
	if kept.Count > 60 {
		t.Errorf("%d Idempotency-Key answers kept: an agent filled etcd through namespaces of its choosing", kept.Count)
	}

	// 4. Public keys to certify: one key of an accepted type and size.
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	weakPub, _ := ssh.NewPublicKey(&weak.PublicKey)
	for what, key := range map[string]string{
		"a 1024-bit RSA key": string(ssh.MarshalAuthorizedKey(weakPub)),
		"60 KiB of key":      "ssh-ed25519 " + strings.Repeat("A", 60<<10),
		"two keys":           testfleet.HostKey("a") + "\n" + testfleet.HostKey("b"),
	} {
		body, _ := json.Marshal(map[string]string{"publicKey": key})
		if r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/bounded/ssh-certificate", "application/json",
			strings.NewReader(string(body))); r.code != http.StatusBadRequest {
			t.Errorf("certifying %s: %d %s", what, r.code, r.body)
		}
	}

	after := dbSize()
	t.Logf("attempted to store %d MiB; etcd grew from %d to %d KiB", attempted>>20, before>>10, after>>10)
	if after-before > 16<<20 {
		t.Errorf("etcd grew by %d MiB", (after-before)>>20)
	}
}
