package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/agent/state"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testhost"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// enrollmentToken has the operator issue a token for pool fra1.
func enrollmentToken(t *testing.T, s *testserver.Server, name string, expires time.Time) *nodusv1.EnrollmentToken {
	t.Helper()
	tok, err := s.Client.NodusV1().EnrollmentTokens().Create(ctx(t), &nodusv1.EnrollmentToken{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login",
			ExpiresAt: &metav1.Time{Time: expires.Truncate(time.Second)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Status.Token, "enroll_"+name+".") || !strings.HasPrefix(tok.Status.CAFingerprint, "sha256:") {
		t.Fatalf("create response: %+v", tok.Status)
	}
	return tok
}

// agentConfig is the credential an enrolled agent holds now.
func agentConfig(t *testing.T, s *testserver.Server, dir string) *rest.Config {
	t.Helper()
	cfg, err := testfleet.AgentConfig(s.Config.Host, dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// enrollAgent enrolls a real agent for node into dir with a token of spec.
func enrollAgent(t *testing.T, s *testserver.Server, node string, spec nodusv1.EnrollmentTokenSpec, dir string) *rest.Config {
	t.Helper()
	cfg, err := testfleet.EnrollAgent(ctx(t), s.Client, s.Config.Host, node, spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestAgentEnrollsReportsAndDrains(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	tok := enrollmentToken(t, s, "first", time.Now().Add(time.Hour))
	dir := t.TempDir()
	enroll := func(token string) (int64, error) {
		return agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: token, CAHash: tok.Status.CAFingerprint, Node: "agent-1", StateDir: dir})
	}

	gen, err := enroll(tok.Status.Token)
	if err != nil || gen != 1 {
		t.Fatalf("enroll: %d %v", gen, err)
	}
	for _, name := range []string{"agent.key", "agent.crt", "agent.json"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s must be 0600: %v %v", name, err, info)
		}
	}
	if _, err := enroll(tok.Status.Token); err == nil || !strings.Contains(err.Error(), "403 "+string(apierror.ReasonEnrollmentTokenUsed)) {
		t.Errorf("a token works once: %v", err)
	}
	expired := enrollmentToken(t, s, "expired", time.Now().Add(-time.Minute))
	if _, err := enroll(expired.Status.Token); err == nil {
		t.Error("an expired token enrolled")
	}
	if _, err := agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: "enroll_x.y", CAHash: "sha256:00", Node: "agent-1", StateDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("a wrong CA pin must stop enrollment: %v", err)
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "agent-1", metav1.GetOptions{})
	if err != nil || n.Spec.Pool != "fra1" || n.Spec.LoginUser != "nodus-test-login" || n.Status.AgentGeneration != 1 {
		t.Fatalf("enrolled node: %v %+v", err, n)
	}

	hostKey := filepath.Join(dir, "ssh_host_ed25519_key.pub")
	if err := os.WriteFile(hostKey, []byte(testfleet.HostKey("agent-1")+" root@agent-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	a, err := agent.New(agent.Options{StateDir: dir, SSHHostKey: hostKey, SSHAddress: "127.0.0.1:2222", DiskPath: dir, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go a.Run(runCtx)

	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) && n.Status.Inventory.CPU > 0 &&
			n.Status.SSHHostKey == testfleet.HostKey("agent-1") && n.Status.SSHAddress == "127.0.0.1:2222"
	})

	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return h.Status.Reservation.Epoch == 1 && c != nil && c.Status == metav1.ConditionTrue &&
			h.Status.Connect != nil && h.Status.Connect.LoginUser == "nodus-test-login"
	})
	if r := f.release(t, f.admin, "agent-1", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Release != nil && h.Status.Release.DrainedAt != nil && h.Status.Reservation.State == nodusv1.ReservationStateReleased
	})
	// The handover: the real agent cleans after the release, and only its
	// evidence makes the node available.
	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		c := n.Status.Cleaning
		return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable && n.Status.Reservation == "" && c != nil &&
			c.Phase == nodusv1.CleaningSucceeded && c.Reservation == "agent-1" && c.Epoch == 2 && c.AgentGeneration == 1 && len(c.Steps) > 0
	})

	t.Run("node restriction", func(t *testing.T) {
		f.node(t, "agent-2")
		own := agentConfig(t, s, dir)
		for path, want := range map[string]int{
			"/apis/nodus.dev/v1/nodes/agent-1":                                    200,
			"/apis/nodus.dev/v1/nodes/agent-2":                                    403,
			"/apis/nodus.dev/v1/nodes":                                            403,
			"/apis/nodus.dev/v1/nodes?fieldSelector=metadata.name%3Dagent-1":      200,
			"/apis/nodus.dev/v1/reservations":                                     403,
			"/apis/nodus.dev/v1/reservations?fieldSelector=status.node%3Dagent-1": 200,
			"/apis/nodus.dev/v1/reservations?fieldSelector=status.node%3Dagent-2": 403,
			"/apis/nodus.dev/v1/projects/acme":                                    403,
			"/apis/nodus.dev/v1/namespaces/acme/reservedhosts":                    403,
			"/apis/nodus.dev/v1/accesstokens":                                     403,
		} {
			if r := do(t, own, "GET", path, "", nil); r.code != want {
				t.Errorf("agent GET %s: %d, want %d", path, r.code, want)
			}
		}
		if r := do(t, own, "POST", "/apis/nodus.dev/v1/nodes/agent-2/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":0}`)); r.code != http.StatusForbidden {
			t.Errorf("agent 1 heartbeating for node 2: %d", r.code)
		}
		// What the server decides is never the agent's to write.
		for field, patch := range map[string]string{
			"provisionState":    `{"status":{"provisionState":"enroll"}}`,
			"reservation":       `{"status":{"reservation":"mine"}}`,
			"reservationUID":    `{"status":{"reservation":"mine","reservationUID":"1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}`,
			"cleaning":          `{"status":{"cleaning":{"request":1,"phase":"Succeeded","requestedAt":"2026-01-01T00:00:00Z"}}}`,
			"appliedEpoch":      `{"status":{"appliedEpoch":99}}`,
			"allocation":        `{"status":{"allocation":"a-1"}}`,
			"agentGeneration":   `{"status":{"agentGeneration":7}}`,
			"lastHeartbeatTime": `{"status":{"lastHeartbeatTime":"2030-01-01T00:00:00Z"}}`,
			"conditions":        `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Forged","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
		} {
			r := do(t, own, "PATCH", "/apis/nodus.dev/v1/nodes/agent-1/status", "application/merge-patch+json", strings.NewReader(patch))
			if r.code != http.StatusForbidden || !strings.Contains(string(r.body), "status."+field) {
				t.Errorf("agent writing status.%s: %d %s", field, r.code, r.body)
			} else if env := envelopeOf(t, r); env.Reason != apierror.ReasonServerOwnedField {
				t.Errorf("agent writing status.%s: reason %s", field, env.Reason)
			}
		}
		if r := do(t, own, "PATCH", "/apis/nodus.dev/v1/nodes/agent-1/status", "application/merge-patch+json",
			strings.NewReader(`{"status":{"sshAddress":"127.0.0.1:2223"}}`)); r.code != 200 {
			t.Errorf("agent reporting its own address: %d %s", r.code, r.body)
		}
	})

	t.Run("re-enrollment retires the old credential", func(t *testing.T) {
		old := agentConfig(t, s, dir)
		stop() // the old agent process goes away
		// What it applied survives it.
		var store *state.Store
		if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
			var err error
			store, err = state.Open(filepath.Join(dir, "state.db"))
			return err == nil, nil
		}); err != nil {
			t.Fatal("the stopped agent's state database stays locked")
		}
		applied, ok, err := store.Applied("agent-1")
		store.Close()
		if err != nil || !ok || applied.Epoch != 2 || applied.Granted() {
			t.Errorf("applied access after a restart: %+v %v %v", applied, ok, err)
		}
		// Only a token issued for the node re-enrolls it.
		if _, err := enroll(enrollmentToken(t, s, "unbound", time.Now().Add(time.Hour)).Status.Token); err == nil ||
			!strings.Contains(err.Error(), "NodeAlreadyEnrolled") {
			t.Errorf("re-enrolling with a token for no node: %v", err)
		}
		second := issueToken(t, s, "second", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "agent-1"})
		gen, err := enroll(second.Status.Token)
		if err != nil || gen != 2 {
			t.Fatalf("re-enroll: %d %v", gen, err)
		}
		waitCode(t, old, "/apis/nodus.dev/v1/nodes/agent-1", http.StatusForbidden)
		if env := envelopeOf(t, do(t, old, "GET", "/apis/nodus.dev/v1/nodes/agent-1", "", nil)); !strings.Contains(env.Fix, "nodusd enroll") {
			t.Errorf("a stale agent credential's fix must say to enroll again: %q", env.Fix)
		}
		if r := do(t, agentConfig(t, s, dir), "GET", "/apis/nodus.dev/v1/nodes/agent-1", "", nil); r.code != 200 {
			t.Errorf("the new credential: %d %s", r.code, r.body)
		}
	})
}

// waitNode polls node until ok and returns it.
// TestAnEnrollmentUnderAnInvalidNameLeavesTheTokenUnused: nodusd enrolls
// under the machine's hostname by default, which may not be a valid node
// name (GPU-Node01). The enrollment must be refused before it uses the
// single-use token up, so that the operator's token still enrolls the
// host under a valid name.
func TestAnEnrollmentUnderAnInvalidNameLeavesTheTokenUnused(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	tok := enrollmentToken(t, s, "hostname", time.Now().Add(time.Hour))
	enroll := func(node string) error {
		_, err := agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: tok.Status.Token, CAHash: tok.Status.CAFingerprint,
			Node: node, StateDir: t.TempDir()})
		return err
	}
	if err := enroll("GPU-Node01"); err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("an enrollment as GPU-Node01: %v, want 422 naming metadata.name", err)
	}
	if err := enroll("gpu-node01"); err != nil {
		t.Errorf("the same token under a valid name: %v", err)
	}
	if _, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-node01", metav1.GetOptions{}); err != nil {
		t.Errorf("the node enrolled under a valid name: %v", err)
	}
}

// TestAnAgentNeverGrantsRootOrABorrowerAccount: nodusd (root) turns the
// login user of a reservation into sshd principals, a group membership and
// sessions it ends, and the reservation's name into a principal line. A
// server that names root (compromised, or a proxy in between that is) must
// not get a tenant's certificate accepted for root, nor for the account
// borrowers' executions run as, nor add principal lines with a name that
// holds a line break, nor with a UID that does. The agent here reads its
// reservations through a proxy that rewrites them.
func TestAnAgentNeverGrantsRootOrABorrowerAccount(t *testing.T) {
	for what, lie := range map[string]struct{ from, to, login string }{
		"root":                          {`"loginUser":"[^"]*"`, `"loginUser":"root"`, "root"},
		"a borrower account":            {`"loginUser":"[^"]*"`, `"loginUser":"nodus-borrower"`, "nodus-borrower"},
		"nobody, above UID_MAX":         {`"loginUser":"[^"]*"`, `"loginUser":"nobody"`, "nobody"},
		"a name with a line of its own": {`("metadata":\{"name":")agent-1"`, `${1}agent-1\nnodus-forged-epoch-1"`, "ubuntu"},
		"a UID with a line of its own":  {`("uid":"[0-9a-f-]{36})"`, `${1}\nnodus-forged-epoch-1"`, "ubuntu"},
	} {
		t.Run(what, func(t *testing.T) {
			s := testserver.StartTestServer(t)
			f := newFleet(t, s)
			dir := t.TempDir()
			enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
			from := regexp.MustCompile(lie.from)
			proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
				if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/reservations") {
					return false
				}
				req.Header.Del("Accept-Encoding") // plain answers to rewrite
				forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(lie.to)}, req)
				return true
			})
			socket := filepath.Join(dir, "p.sock")
			runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy},
				Socket: socket, BorrowerUser: "nodus-borrower"})
			f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
			// The agent acknowledges what it applied in its heartbeats; one
			// that refused the reservation acknowledges nothing.
			_ = testfleet.Eventually(ctx(t), 5*time.Second, func(c context.Context) (bool, error) {
				n, err := s.Client.NodusV1().Nodes().Get(c, "agent-1", metav1.GetOptions{})
				return err == nil && n.Status.AppliedEpoch > 0, nil
			})
			var principals strings.Builder
			_ = agent.Principals(socket, lie.login, &principals)
			if strings.TrimSpace(principals.String()) != "" {
				t.Errorf("the agent serves principals for %s: %q", lie.login, principals.String())
			}
		})
	}
}

// TestAnAgentTrustsOneSSHUserCAKey: nodusd writes the server's SSH user CA
// where sshd's TrustedUserCAKeys reads it. Each key there is a CA sshd
// trusts for every login user, so an answer with a second key (a
// compromised server, or a proxy in between that is) must not reach the
// file: the agent refuses to start instead.
func TestAnAgentTrustsOneSSHUserCAKey(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if req.URL.Path != "/ssh-user-ca.pub" {
			return false
		}
		answer := httptest.NewRecorder()
		forward.ServeHTTP(answer, req)
		_, _ = w.Write(append(answer.Body.Bytes(), []byte("\n"+testfleet.HostKey("another-ca")+"\n")...))
		return true
	})
	caFile := filepath.Join(dir, "nodus_user_ca.pub")
	a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}, SSHDCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := a.Run(runCtx); err == nil || !strings.Contains(err.Error(), "SSH user CA") {
		t.Errorf("an agent given two SSH user CA keys ran: %v", err)
	}
	if data, err := os.ReadFile(caFile); err == nil {
		t.Errorf("the agent wrote %q for sshd to trust", data)
	}
}

// TestAFailedInventoryReportIsSentAgainSoon: an agent's first inventory
// report (inventory, SSH host key and address) that the server failed to
// take must be sent again within seconds, not at the next periodic read
// (every 5 min): until it lands the node has no inventory to be placed by
// and no host key for strict SSH checks.
func TestAFailedInventoryReportIsSentAgainSoon(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key.pub")
	if err := os.WriteFile(hostKey, []byte(testfleet.HostKey("agent-1")+" root@agent-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/nodes/agent-1/status") || failed.Add(1) > 1 {
			return false
		}
		answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is restarting")
		return true
	})
	runAgent(t, agent.Options{StateDir: dir, SSHHostKey: hostKey, SSHAddress: "127.0.0.1:2222", DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})

	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		return n.Status.Inventory.CPU > 0 && n.Status.SSHHostKey == testfleet.HostKey("agent-1") && n.Status.SSHAddress == "127.0.0.1:2222"
	})
	if failed.Load() == 0 {
		t.Error("the proxy failed no inventory report: the test tested nothing")
	}
}

// TestAnAgentReportsOnlyItsOwnFields: an agent built before a field of
// its Node was added reads the node without it. Had it written back the
// whole status as it decoded it, the write would clear that field, or,
// for a field the server owns, be refused and leave the node's reports
// frozen until the agent is upgraded. A proxy hides the node's labels from
// the agent's reads (what such an agent would not see); its report must
// still land, and the labels stay.
func TestAnAgentReportsOnlyItsOwnFields(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "agent-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"rack": "r7"}
	if _, err := s.Client.NodusV1().Nodes().Update(ctx(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var hidden atomic.Int32
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if req.Method != http.MethodGet || req.URL.Path != "/apis/nodus.dev/v1/nodes/agent-1" {
			return false
		}
		answer := httptest.NewRecorder()
		forward.ServeHTTP(answer, req)
		var node map[string]interface{}
		if answer.Code != http.StatusOK || json.Unmarshal(answer.Body.Bytes(), &node) != nil {
			w.WriteHeader(answer.Code)
			_, _ = w.Write(answer.Body.Bytes())
			return true
		}
		if meta, ok := node["metadata"].(map[string]interface{}); ok && meta["labels"] != nil {
			delete(meta, "labels")
			hidden.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(node)
		return true
	})
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key.pub")
	if err := os.WriteFile(hostKey, []byte(testfleet.HostKey("agent-1")+" root@agent-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runAgent(t, agent.Options{StateDir: dir, SSHHostKey: hostKey, SSHAddress: "127.0.0.1:2222", DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})

	reported := waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		return n.Status.Inventory.CPU > 0 && n.Status.SSHHostKey == testfleet.HostKey("agent-1") && n.Status.SSHAddress == "127.0.0.1:2222"
	})
	if reported.Labels["rack"] != "r7" {
		t.Errorf("the agent's report changed the node's labels: %v", reported.Labels)
	}
	if hidden.Load() == 0 {
		t.Error("the proxy hid the labels from no read of the agent's: the test tested nothing")
	}
}

// runAgent runs a real agent in process until the test ends.
func runAgent(t *testing.T, opts agent.Options) {
	t.Helper()
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go a.Run(runCtx)
}

// agentProxy serves the API to the agent enrolled in dir through
// lossyProxy, which answers what lose takes itself, and returns its URL.
// The agent is made to trust the proxy's certificate as it trusts the
// server's; the proxy calls the server with the agent's credential.
func agentProxy(t *testing.T, s *testserver.Server, dir string, lose func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool) string {
	t.Helper()
	proxy := lossyProxy(t, agentConfig(t, s, dir), lose)
	caFile := filepath.Join(dir, "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, append(ca, proxy.CAData...), 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy.Host
}

func waitNode(t *testing.T, s *testserver.Server, name string, ok func(*nodusv1.Node) bool) *nodusv1.Node {
	t.Helper()
	var last *nodusv1.Node
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		n, err := s.Client.NodusV1().Nodes().Get(c, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		return ok(n), nil
	})
	if err != nil {
		t.Fatalf("node %s never got there: %+v", name, last)
	}
	return last
}

// waitCode polls path until it answers code (the authorizer reads nodes
// from the watch cache, a few milliseconds behind).
func waitCode(t *testing.T, cfg *rest.Config, path string, code int) {
	t.Helper()
	var last response
	err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		last = do(t, cfg, "GET", path, "", nil)
		return last.code == code, nil
	})
	if err != nil {
		t.Fatalf("GET %s: %d, want %d: %s", path, last.code, code, last.body)
	}
}

// TestARestartedAgentEndsWhatARetirementLeftRunning: nodusd ends a login
// user's processes when its access is retired, SIGKILL only after the grace
// period. Stopped within that period (a restart, an upgrade), it must end
// them once it runs again: the retirement is recorded, so applying it
// again does nothing, and the tenant's process would otherwise keep
// running, with the host never drained.
func TestARestartedAgentEndsWhatARetirementLeftRunning(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a tenant's process as a login account of its own (CI is root)")
	}
	login, uid, gid, remove, err := testhost.LoginAccount("nodus-rs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: login}, dir)
	start := func(grace time.Duration) (stop func()) {
		a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: grace, Socket: filepath.Join(dir, "p.sock")})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = a.Run(runCtx); close(done) }()
		return func() { cancel(); <-done }
	}
	stop := start(time.Minute)
	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool { return n.Status.AppliedEpoch == 1 })

	// The tenant's process ignores SIGTERM: only SIGKILL, after the grace
	// period, ends it. It says so once its trap is set: a SIGTERM before
	// that ended it (CI, once), and the test had nothing left to test.
	tenant := exec.Command("sh", "-c", `trap "" TERM; echo trapped; while :; do sleep 1; done`)
	tenant.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := tenant.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sessions.SignalEveryProcessOf(uid, syscall.SIGKILL) })
	trapped := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "trapped\n" {
			err = fmt.Errorf("the tenant's process said %q", line)
		}
		trapped <- err
	}()
	select {
	case err := <-trapped:
		if err != nil {
			t.Fatalf("the tenant's process did not set its trap: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tenant's process did not set its trap in 30 s")
	}
	exited := make(chan struct{})
	go func() { _ = tenant.Wait(); close(exited) }()

	if r := f.release(t, f.admin, "agent-1", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	time.Sleep(2 * time.Second) // the agent applies the release and sends SIGTERM
	stop()
	select {
	case <-exited:
		t.Fatal("the tenant's process ended before the grace period did: nothing left to test")
	default:
	}
	stop = start(time.Second)
	t.Cleanup(stop)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the tenant's process still runs 30 s after the agent came back")
	}
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Release != nil && h.Status.Release.DrainedAt != nil
	})
}
