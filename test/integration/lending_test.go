package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// lendingFleet is a fleet whose pool "gpu" lends to borrower projects.
type lendingFleet struct {
	*fleet
	borrowers map[string]*rest.Config // project → a member's credentials
	agents    map[string]*rest.Config // node → its agent's credentials
	aliases   map[string]string       // node → host alias
	silence   map[string]func()       // node → stops its agent's heartbeats
}

// newLendingFleet enrolls nodes (8 GPUs each) into pool "gpu", reserves them
// to acme, keeps their (simulated) agents heartbeating, and opens the pool
// to borrowers with the given GPU caps.
func newLendingFleet(t *testing.T, s *testserver.Server, nodes int, caps map[string]int32, showBorrowers bool) *lendingFleet {
	t.Helper()
	f := &lendingFleet{fleet: newFleet(t, s), borrowers: map[string]*rest.Config{}, agents: map[string]*rest.Config{}, aliases: map[string]string{},
		silence: map[string]func(){}}
	c := s.Client.NodusV1()
	pool := &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: nodusv1.PoolSpec{Lending: &nodusv1.PoolLending{Open: true, ShowBorrowers: showBorrowers}}}
	for name, max := range caps {
		pool.Spec.Lending.Borrowers = append(pool.Spec.Lending.Borrowers, nodusv1.PoolBorrower{Project: name, MaxGPUs: max})
		if _, err := c.Projects().Create(ctx(t), project(name, nodusv1.ProjectMember{Name: "m-" + name, Role: nodusv1.ProjectRoleMember}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.borrowers[name] = tokenFor(t, s, "m-"+name)
	}
	if _, err := c.Pools().Create(ctx(t), pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("gpu-%02d", i)
		f.agents[name] = enrollAgent(t, s, name, nodusv1.EnrollmentTokenSpec{Pool: "gpu", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
		n, err := c.Nodes().Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Inventory = nodusv1.NodeInventory{CPU: 224, MemoryMiB: 2 << 20, DiskGiB: 3500}
		n.Status.SSHAddress = "192.0.2.20:22"
		for g := 0; g < 8; g++ {
			n.Status.Inventory.GPUs = append(n.Status.Inventory.GPUs, nodusv1.NodeGPU{Type: "h100-sxm-80g", MemoryMiB: 81559})
		}
		if _, err := c.Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.aliases[name] = lending.HostAlias(n)
		f.reserve(t, name, nodusv1.ReservationPlacement{Node: name}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	}
	// The simulated agents heartbeat with their own credentials.
	beatCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	for name, cfg := range f.agents {
		beatCtx, silence := context.WithCancel(beatCtx)
		f.silence[name] = silence
		go func() {
			for beatCtx.Err() == nil {
				_ = testfleet.Heartbeat(beatCtx, versioned.NewForConfigOrDie(cfg), name, nodusv1.NodeHeartbeat{AgentGeneration: 1})
				select {
				case <-beatCtx.Done():
				case <-time.After(2 * time.Second):
				}
			}
		}()
	}
	for name := range f.agents {
		f.waitHost(t, name, func(h *nodusv1.ReservedHost) bool {
			return h.Status.Reservation.State == nodusv1.ReservationStateActive
		})
	}
	return f
}

// changePool updates the pool "gpu" as change says.
func (f *lendingFleet) changePool(t *testing.T, change func(*nodusv1.PoolLending)) {
	t.Helper()
	pools := f.s.Client.NodusV1().Pools()
	pool, err := pools.Get(ctx(t), "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(pool.Spec.Lending)
	if _, err := pools.Update(ctx(t), pool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// lend POSTs to lend (or withdraw) as cfg.
func (f *lendingFleet) lend(t *testing.T, cfg *rest.Config, action, name, body string, headers ...string) response {
	t.Helper()
	return do(t, cfg, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/"+name+"/"+action, "application/json", strings.NewReader(body), headers...)
}

func (f *lendingFleet) submit(t *testing.T, project string, gpus int, runtime int) *nodusv1.Execution {
	t.Helper()
	e, err := versioned.NewForConfigOrDie(f.borrowers[project]).NodusV1().Executions(project).Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "job-"},
		Spec:       nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: int32(gpus), MaxRuntimeSeconds: int64(runtime)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// report POSTs an execution report as node's agent.
func (f *lendingFleet) report(t *testing.T, node, project, name string, rep nodusv1.ExecutionReport) response {
	t.Helper()
	data, _ := json.Marshal(rep)
	return do(t, f.agents[node], "POST", "/apis/nodus.dev/v1/namespaces/"+project+"/executions/"+name+"/report", "application/json", strings.NewReader(string(data)))
}

func (f *lendingFleet) waitExecution(t *testing.T, project, name string, ok func(*nodusv1.Execution) bool) *nodusv1.Execution {
	t.Helper()
	var last *nodusv1.Execution
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		e, err := f.s.Client.NodusV1().Executions(project).Get(c, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = e
		return ok(e), nil
	})
	if err != nil {
		t.Fatalf("execution %s/%s never got there: %+v", project, name, last.Status)
	}
	return last
}

func (f *lendingFleet) nodeOf(alias string) string {
	for n, a := range f.aliases {
		if a == alias {
			return n
		}
	}
	return ""
}

// TestLendingAgreementAndExecutionLifecycle: the owner lends and withdraws
// under its epoch; the scheduler places; the agent reports; borrowers
// cancel and read logs; nobody sees more than their share.
func TestLendingAgreementAndExecutionLifecycle(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 4}, false)
	beta := f.borrowers["beta"]
	node := "gpu-00"
	epoch := f.reservation(t, node).Status.Epoch
	body := func(extra string) string { return fmt.Sprintf(`{"epoch":%d%s}`, epoch, extra) }
	// Its agent runs two executions at once, each as an account of its own.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := s.Client.NodusV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.ExecutionSlots = 2
		_, err = s.Client.NodusV1().Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// Nothing is placed before the owner lends.
	waiting := f.submit(t, "beta", 2, 60)
	f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool {
		return e.Status.Phase == nodusv1.ExecutionPending && e.Status.Reason == "Waiting" && strings.Contains(e.Status.Message, "waiting for room in pool gpu")
	})

	for name, tc := range map[string]struct {
		cfg     *rest.Config
		action  string
		body    string
		headers []string
		code    int
		reason  metav1.StatusReason
	}{
		"member may not lend":         {f.member, "lend", body(""), nil, 403, metav1.StatusReasonForbidden},
		"borrower may not lend":       {beta, "lend", body(""), nil, 403, metav1.StatusReasonForbidden},
		"no epoch":                    {f.admin, "lend", `{}`, nil, 422, apierror.ReasonEpochRequired},
		"stale epoch":                 {f.admin, "lend", fmt.Sprintf(`{"epoch":%d}`, epoch-1), nil, 409, apierror.ReasonEpochConflict},
		"more GPUs than the host has": {f.admin, "lend", body(`,"maxGPUs":9`), nil, 422, metav1.StatusReasonInvalid},
		"negative GPUs":               {f.admin, "lend", body(`,"maxGPUs":-1`), nil, 422, metav1.StatusReasonInvalid},
		"too many executions":         {f.admin, "lend", body(`,"maxExecutions":1000`), nil, 422, metav1.StatusReasonInvalid},
		"more executions than slots":  {f.admin, "lend", body(`,"maxExecutions":3`), nil, 422, metav1.StatusReasonInvalid},
		"unknown field":               {f.admin, "lend?fieldValidation=Strict", body(`,"gpus":2`), nil, 400, metav1.StatusReasonBadRequest},
		"stale If-Match":              {f.admin, "lend", body(""), []string{"If-Match", `"0-0"`}, 412, apierror.ReasonPreconditionFailed},
	} {
		r := f.lend(t, tc.cfg, tc.action, node, tc.body, tc.headers...)
		if r.code != tc.code || envelopeOf(t, r).Reason != tc.reason {
			t.Errorf("%s: %d %s, want %d %s", name, r.code, r.body, tc.code, tc.reason)
		}
	}
	if l, err := s.Client.NodusV1().HostLendings("acme").Get(ctx(t), node, metav1.GetOptions{}); err == nil {
		t.Fatalf("refused lends left a HostLending: %+v", l.Status)
	}

	// Lend 3 of 8 GPUs; the answer is the owner's HostLending.
	r := f.lend(t, f.admin, "lend", node, body(`,"maxGPUs":3,"maxExecutions":2`), "Idempotency-Key", "lend-1")
	var hl nodusv1.HostLending
	if r.code != 200 || json.Unmarshal(r.body, &hl) != nil || hl.Status.State != nodusv1.HostLendingLent || hl.Status.MaxGPUs != 3 ||
		hl.Status.MaxExecutions != 2 || hl.Status.Pool != "gpu" || hl.Status.Epoch != epoch {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	if again := f.lend(t, f.admin, "lend", node, body(`,"maxGPUs":3,"maxExecutions":2`), "Idempotency-Key", "lend-1"); again.code != 200 ||
		again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retried lend is not a replay: %d %v", again.code, again.header)
	}
	placed := f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if placed.Status.Host != f.aliases[node] || len(placed.Status.GPUIndices) != 2 || strings.Contains(string(mustJSON(t, placed)), node) ||
		strings.Contains(string(mustJSON(t, placed)), "acme") {
		t.Fatalf("placement shows more than an alias, or not the GPUs: %s", mustJSON(t, placed))
	}
	// Two more GPUs do not fit in the three lent: the second one waits.
	second := f.submit(t, "beta", 2, 60)
	f.waitExecution(t, "beta", second.Name, func(e *nodusv1.Execution) bool {
		return e.Status.Phase == nodusv1.ExecutionPending && e.Status.Reason == "Waiting" && strings.Contains(e.Status.Message, ": 2 GPUs within project beta's cap")
	})

	// Owners see how much is borrowed, not by whom (the pool does not show borrowers).
	waitLending(t, s, node, func(l *nodusv1.HostLending) bool {
		return l.Status.BorrowedGPUs == 2 && l.Status.Executions == 1 && len(l.Status.Borrowers) == 0 &&
			slices.Equal(l.Status.GPUIndices, placed.Status.GPUIndices)
	})
	if r := do(t, f.viewer, "GET", "/apis/nodus.dev/v1/namespaces/acme/hostlendings/"+node, "", nil); r.code != 200 {
		t.Errorf("the owner's viewer reads the HostLending: %d", r.code)
	}
	for _, path := range []string{"/apis/nodus.dev/v1/namespaces/acme/hostlendings/" + node, "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/" + node,
		"/apis/nodus.dev/v1/nodes/" + node, "/apis/nodus.dev/v1/executions"} {
		if r := do(t, beta, "GET", path, "", nil); r.code != http.StatusForbidden {
			t.Errorf("a borrower reads %s: %d", path, r.code)
		}
	}

	// Only the host's own agent reports, and only for what is placed on it.
	other := newAgentOnly(t, f, "gpu-99")
	if r := do(t, other, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+placed.Name+"/report", "application/json", strings.NewReader(`{"phase":"running"}`)); r.code != 404 {
		t.Errorf("another node's agent reports the execution: %d %s", r.code, r.body)
	}
	if r := do(t, beta, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+placed.Name+"/report", "application/json", strings.NewReader(`{"phase":"succeeded"}`)); r.code != 403 {
		t.Errorf("a borrower reports its own execution: %d %s", r.code, r.body)
	}
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: "pending"}); r.code != 400 {
		t.Errorf("reporting pending: %d %s", r.code, r.body)
	}
	// An agent tells the borrower how its execution ended only where it
	// could know: not a success of one it never started, a cancel the
	// borrower never asked for, or an end the server decides. A refused
	// report writes nothing: its output would have been kept as the
	// execution's last, and the real end's dropped.
	for what, lie := range map[string]struct {
		report nodusv1.ExecutionReport
		code   int
	}{
		"a success without a start":          {nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded}, http.StatusConflict},
		"a cancel nobody asked for":          {nodusv1.ExecutionReport{Phase: nodusv1.ExecutionCancelled, Reason: "Cancelled"}, http.StatusConflict},
		"the server's HostUnreachable":       {nodusv1.ExecutionReport{Phase: nodusv1.ExecutionFailed, Reason: "HostUnreachable"}, http.StatusUnprocessableEntity},
		"the server's NotEndedByHost":        {nodusv1.ExecutionReport{Phase: nodusv1.ExecutionFailed, Reason: "NotEndedByHost"}, http.StatusUnprocessableEntity},
		"the server's Waiting, as it starts": {nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Reason: "Waiting"}, http.StatusUnprocessableEntity},
	} {
		lie.report.Log = "forged output of " + what + "\n"
		if r := f.report(t, node, "beta", placed.Name, lie.report); r.code != lie.code {
			t.Errorf("an agent reports %s: %d %s, want %d", what, r.code, r.body, lie.code)
		}
	}
	if e := f.waitExecution(t, "beta", placed.Name, func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionScheduled {
		t.Fatalf("refused reports changed the execution: %+v", e.Status)
	}
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	zero := int32(0)
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: &zero, Reason: "Exited",
		Log: "epoch 1 loss 0.3\ndone\n", LogDroppedBytes: 10}); r.code != 200 {
		t.Fatalf("report succeeded: %d %s", r.code, r.body)
	}
	done := f.waitExecution(t, "beta", placed.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionSucceeded })
	// A repeated end (a lost answer's retry) is answered without the
	// borrower's command and environment: the run is over.
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: &zero}); r.code != 200 ||
		strings.Contains(string(r.body), `"train"`) || !strings.Contains(string(r.body), `"phase":"succeeded"`) {
		t.Errorf("a repeated end report's answer: %d %s", r.code, r.body)
	}
	if done.Status.StartedAt == nil || done.Status.FinishedAt == nil || done.Status.ExitCode == nil || *done.Status.ExitCode != 0 {
		t.Errorf("a succeeded execution's status: %+v", done.Status)
	}
	if r := do(t, beta, "GET", "/apis/nodus.dev/v1/namespaces/beta/executions/"+placed.Name+"/log", "", nil); r.code != 200 ||
		string(r.body) != "[nodus: 10 earlier bytes of output were not kept]\nepoch 1 loss 0.3\ndone\n" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("log: %d %q %v", r.code, r.body, r.header)
	}
	for who, cfg := range map[string]*rest.Config{"the owner's admin": f.admin, "another project": f.outsider} {
		if r := do(t, cfg, "GET", "/apis/nodus.dev/v1/namespaces/beta/executions/"+placed.Name+"/log", "", nil); r.code != http.StatusForbidden {
			t.Errorf("%s reads a borrower's log: %d", who, r.code)
		}
	}
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionFailed}); r.code != 409 || envelopeOf(t, r).Reason != apierror.ReasonExecutionFinished {
		t.Errorf("a finished execution reported again: %d %s", r.code, r.body)
	}
	if r := do(t, beta, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+placed.Name+"/cancel", "application/json", strings.NewReader(`{}`)); r.code != 409 ||
		envelopeOf(t, r).Reason != apierror.ReasonExecutionFinished {
		t.Errorf("cancelling a finished execution: %d %s", r.code, r.body)
	}

	// The freed GPUs go to the waiting one; the borrower cancels it while it runs.
	running := f.waitExecution(t, "beta", second.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	// The host's agent sees what it runs, not the borrower's records: its
	// credential may have been copied by a tenant with root on the host.
	agentsView, listErr := versioned.NewForConfigOrDie(f.agents[node]).NodusV1().Executions("").List(ctx(t),
		metav1.ListOptions{FieldSelector: "status.host=" + f.aliases[node]})
	if listErr != nil {
		t.Fatalf("the agent lists the executions on its host: %v", listErr)
	}
	for _, e := range agentsView.Items {
		if e.UID == placed.UID || e.Status.Phase.Finished() {
			t.Errorf("the host's agent lists a finished execution: %s/%s %s", e.Namespace, e.Name, e.Status.Phase)
		}
	}
	if !slices.ContainsFunc(agentsView.Items, func(e nodusv1.Execution) bool { return e.UID == running.UID }) {
		t.Errorf("the host's agent does not list the execution placed on its host now")
	}
	if r := f.report(t, node, "beta", running.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	if r := do(t, f.viewer, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+running.Name+"/cancel", "application/json", strings.NewReader(`{}`)); r.code != 403 {
		t.Errorf("the owner's viewer cancels a borrower's execution: %d", r.code)
	}
	r = do(t, beta, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+running.Name+"/cancel", "application/json", strings.NewReader(`{}`))
	if r.code != 200 || !strings.Contains(string(r.body), `"cancelRequestedAt"`) || !strings.Contains(string(r.body), `"phase":"running"`) {
		t.Fatalf("cancel while running: %d %s", r.code, r.body)
	}
	if r := f.report(t, node, "beta", running.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionCancelled, Reason: "Cancelled"}); r.code != 200 {
		t.Fatalf("report cancelled: %d %s", r.code, r.body)
	}
	// A pending execution is cancelled at once and its record kept.
	pending := f.submit(t, "beta", 4, 60) // never fits in 3 lent GPUs
	r = do(t, beta, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+pending.Name+"/cancel", "application/json", strings.NewReader(`{}`))
	if r.code != 200 || !strings.Contains(string(r.body), `"phase":"cancelled"`) {
		t.Fatalf("cancel while pending: %d %s", r.code, r.body)
	}
	if r := do(t, beta, "POST", "/apis/nodus.dev/v1/namespaces/beta/executions/"+pending.Name+"/cancel", "application/json", strings.NewReader(`{}`)); r.code != 200 {
		t.Errorf("cancelling twice: %d %s", r.code, r.body)
	}

	// Withdrawal: what is scheduled but not started drains; a start is refused.
	late := f.submit(t, "beta", 1, 60)
	f.waitExecution(t, "beta", late.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := f.lend(t, f.admin, "withdraw", node, body("")); r.code != 200 || !strings.Contains(string(r.body), `"state":"withdrawn"`) {
		t.Fatalf("withdraw: %d %s", r.code, r.body)
	}
	if r := f.report(t, node, "beta", late.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 409 || envelopeOf(t, r).Reason != apierror.ReasonHostNotLent {
		t.Errorf("starting on a withdrawn host: %d %s", r.code, r.body)
	}
	drained := f.waitExecution(t, "beta", late.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionDrained })
	if drained.Status.Reason != "Drained" || drained.Status.FinishedAt == nil {
		t.Errorf("drained before it started: %+v", drained.Status)
	}
	if r := f.lend(t, f.admin, "withdraw", node, body("")); r.code != 200 {
		t.Errorf("withdrawing twice: %d %s", r.code, r.body)
	}
	// The HostLending goes with its reservation.
	if err := s.Client.NodusV1().Reservations().Delete(ctx(t), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		_, err := s.Client.NodusV1().HostLendings("acme").Get(c, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Error("the HostLending outlived its reservation")
	}
	// A pool that does not lend refuses lending.
	f.node(t, "closed-1")
	f.reserve(t, "closed-1", nodusv1.ReservationPlacement{Node: "closed-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	h := f.waitHost(t, "closed-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if r := f.lend(t, f.admin, "lend", "closed-1", fmt.Sprintf(`{"epoch":%d}`, h.Status.Reservation.Epoch)); r.code != 409 || envelopeOf(t, r).Reason != apierror.ReasonLendingClosed {
		t.Errorf("lending in a closed pool: %d %s", r.code, r.body)
	}
}

// newAgentOnly enrolls a node with no reservation, for its credential.
func newAgentOnly(t *testing.T, f *lendingFleet, name string) *rest.Config {
	t.Helper()
	return enrollAgent(t, f.s, name, nodusv1.EnrollmentTokenSpec{Pool: "gpu", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
}

func waitLending(t *testing.T, s *testserver.Server, name string, ok func(*nodusv1.HostLending) bool) *nodusv1.HostLending {
	t.Helper()
	var last *nodusv1.HostLending
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		l, err := s.Client.NodusV1().HostLendings("acme").Get(c, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = l
		return ok(l), nil
	})
	if err != nil {
		t.Fatalf("hostlending %s never got there: %+v", name, last)
	}
	return last
}

func mustJSON(t *testing.T, v interface{}) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLendingCapsNeverDoubleBook: 200 executions from 5 borrowers on 10
// simulated hosts. Every moment the watch shows, no GPU is held twice, no
// host runs more than it lends, and no borrower more than its cap; all 200
// finish, and a capped borrower was seen waiting.
func TestLendingCapsNeverDoubleBook(t *testing.T) {
	s := testserver.StartTestServer(t)
	caps := map[string]int32{"b1": 4, "b2": 16, "b3": 16, "b4": 24, "b5": 32}
	f := newLendingFleet(t, s, 10, caps, true)
	lent := map[string]int32{}
	for i, node := range sortedKeys(f.agents) {
		max := int32(8)
		if i%3 == 0 {
			max = 5 // some owners keep GPUs for themselves
		}
		epoch := f.reservation(t, node).Status.Epoch
		if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":%d,"maxExecutions":4}`, epoch, max)); r.code != 200 {
			t.Fatalf("lend %s: %d %s", node, r.code, r.body)
		}
		lent[f.aliases[node]] = max
	}

	// The checker watches every execution and checks each state it sees.
	w, err := s.Client.NodusV1().Executions("").Watch(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]*nodusv1.Execution{}
	var violations []string
	capHeld := false
	finished := 0
	check := func() {
		gpus := map[string]map[int32]string{}
		perHost := map[string]int32{}
		execs := map[string]int32{}
		perBorrower := map[string]int32{}
		for key, e := range seen {
			if e.Status.Phase != nodusv1.ExecutionScheduled && e.Status.Phase != nodusv1.ExecutionRunning {
				continue
			}
			if gpus[e.Status.Host] == nil {
				gpus[e.Status.Host] = map[int32]string{}
			}
			for _, g := range e.Status.GPUIndices {
				if holder, taken := gpus[e.Status.Host][g]; taken {
					violations = append(violations, fmt.Sprintf("GPU %d of %s held by %s and %s", g, e.Status.Host, holder, key))
				}
				gpus[e.Status.Host][g] = key
			}
			perHost[e.Status.Host] += int32(len(e.Status.GPUIndices))
			execs[e.Status.Host]++
			perBorrower[e.Namespace] += e.Spec.GPUs
		}
		for host, n := range perHost {
			if n > lent[host] {
				violations = append(violations, fmt.Sprintf("%s runs %d GPUs, lends %d", host, n, lent[host]))
			}
			if execs[host] > 4 {
				violations = append(violations, fmt.Sprintf("%s runs %d executions, allows 4", host, execs[host]))
			}
		}
		for p, n := range perBorrower {
			if n > caps[p] {
				violations = append(violations, fmt.Sprintf("%s holds %d GPUs, its cap is %d", p, n, caps[p]))
			}
		}
		if perBorrower["b1"] == caps["b1"] {
			capHeld = true
		}
	}
	allDone := make(chan struct{})
	go func() {
		for ev := range w.ResultChan() {
			e, ok := ev.Object.(*nodusv1.Execution)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			key := e.Namespace + "/" + e.Name
			old := seen[key]
			seen[key] = e
			if e.Status.Phase == nodusv1.ExecutionSucceeded && (old == nil || old.Status.Phase != nodusv1.ExecutionSucceeded) {
				finished++
				if finished == 200 {
					close(allDone)
				}
			}
			check()
			mu.Unlock()
		}
	}()

	// The simulated agents start what is placed on them and finish it soon after.
	agentCtx, stopAgents := context.WithCancel(ctx(t))
	defer stopAgents()
	for node, cfg := range f.agents {
		go simulateAgent(agentCtx, t, f, node, cfg)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	projects := sortedKeys(f.borrowers)
	for i := 0; i < 200; i++ {
		f.submit(t, projects[i%5], 1+rng.IntN(4), 60)
	}
	select {
	case <-allDone:
	case <-time.After(120 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of 200 executions succeeded", finished)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("%d violations, first: %s", len(violations), violations[0])
	}
	if !capHeld {
		t.Error("b1 (cap 4 GPUs) never held its whole cap: the cap bounded nothing")
	}
	// A node the operator deletes takes its running executions with it: they
	// fail as HostLost instead of running forever.
	stopAgents()
	last := f.submit(t, "b5", 1, 60)
	placed := f.waitExecution(t, "b5", last.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	node := f.nodeOf(placed.Status.Host)
	if r := f.report(t, node, "b5", last.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	deleteGoneNode(t, s, node)
	lost := f.waitExecution(t, "b5", last.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionFailed })
	if lost.Status.Reason != "HostLost" || lost.Status.FinishedAt == nil {
		t.Errorf("an execution on a deleted node: %+v", lost.Status)
	}

	// Its owner's HostLending no longer counts what ran there.
	gone := waitLending(t, s, node, func(l *nodusv1.HostLending) bool { return l.Status.Executions == 0 })
	if gone.Status.BorrowedGPUs != 0 || len(gone.Status.GPUIndices) != 0 || len(gone.Status.Borrowers) != 0 {
		t.Errorf("the lending of a deleted node: %+v", gone.Status)
	}

	// With the pool showing borrowers, owners see who borrowed (now: nobody).
	other := "gpu-00"
	if node == other {
		other = "gpu-01"
	}
	l := waitLending(t, s, other, func(l *nodusv1.HostLending) bool { return l.Status.Executions == 0 })
	if l.Status.BorrowedGPUs != 0 || l.Status.State != nodusv1.HostLendingLent {
		t.Errorf("an idle lent host: %+v", l.Status)
	}
}

// simulateAgent is a node's agent without processes: it reports each
// execution placed on its host running, then succeeded after a moment.
func simulateAgent(ctx context.Context, t *testing.T, f *lendingFleet, node string, cfg *rest.Config) {
	client := versioned.NewForConfigOrDie(cfg).NodusV1()
	w, err := client.Executions("").Watch(ctx, metav1.ListOptions{FieldSelector: "status.host=" + f.aliases[node]})
	if err != nil {
		t.Errorf("agent %s watch: %v", node, err)
		return
	}
	defer w.Stop()
	post := func(e *nodusv1.Execution, rep nodusv1.ExecutionReport) error {
		_, err := client.Executions(e.Namespace).Report(ctx, e.Name, &rep, metav1.CreateOptions{})
		return err
	}
	for ev := range w.ResultChan() {
		e, ok := ev.Object.(*nodusv1.Execution)
		if !ok || e.Status.Phase != nodusv1.ExecutionScheduled {
			continue
		}
		go func() {
			if err := post(e, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); err != nil {
				return
			}
			time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
			zero := int32(0)
			_ = testfleet.Eventually(ctx, 10*time.Second, func(context.Context) (bool, error) {
				return post(e, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: &zero}) == nil, nil
			})
		}()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestAHostWithoutItsInventoryIsNotLentUnbounded: a host whose agent has
// not reported its memory and CPUs (0, as a new or an older agent leaves
// them) would lend a default share of 0, which a sandbox takes for no
// limit: borrowers would run unbounded beside the owner's work. Such a
// lend is refused (422), whatever the owner names: no more than the host
// reported, and no less than one execution needs.
func TestAHostWithoutItsInventoryIsNotLentUnbounded(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	forgeNodeInEtcd(t, s, "gpu-00", func(n *nodusv1.Node) { n.Status.Inventory.MemoryMiB, n.Status.Inventory.CPU = 0, 0 })
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	for what, body := range map[string]string{
		"by default":      fmt.Sprintf(`{"epoch":%d}`, epoch),
		"memory named":    fmt.Sprintf(`{"epoch":%d,"memoryMiB":65536}`, epoch),
		"CPUs named":      fmt.Sprintf(`{"epoch":%d,"milliCPUs":16000}`, epoch),
		"both named as 0": fmt.Sprintf(`{"epoch":%d,"memoryMiB":0,"milliCPUs":0}`, epoch),
	} {
		r := f.lend(t, f.admin, "lend", "gpu-00", body)
		if r.code != http.StatusUnprocessableEntity {
			t.Errorf("lending a host without its inventory %s: %d %s", what, r.code, r.body)
		}
	}
	if l := f.reservation(t, "gpu-00").Status.Lending; l != nil && l.Lent {
		t.Errorf("the host was lent: %+v", l)
	}
}

// TestALendWithoutCapsIsPlacedWithinTheHostsShare: a lend made before
// every lend had to cap memory and CPUs has caps of 0, which a sandbox
// takes for no limit. The scheduler places under it with the share a lend
// would give now, from the node's inventory, and places nothing on such a
// host whose inventory does not say its memory and CPUs.
func TestALendWithoutCapsIsPlacedWithinTheHostsShare(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	if r := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d,"maxGPUs":4}`, epoch)); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	// The agreement as an older server stored it.
	forgeInEtcd(t, s, "/registry/nodus.dev/reservations/gpu-00", func(r *nodusv1.Reservation) {
		r.Status.Lending.MemoryMiB, r.Status.Lending.MilliCPUs = 0, 0
	})
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		r, err := s.Client.NodusV1().Reservations().Get(c, "gpu-00", metav1.GetOptions{})
		return err == nil && r.Status.Lending != nil && r.Status.Lending.MemoryMiB == 0, err
	}); err != nil {
		t.Fatalf("the forged agreement never showed: %v", err)
	}
	// Four GPUs of eight lend half the node's 2 TiB and 224 CPUs; a
	// one-GPU execution gets a quarter of that.
	e := f.submit(t, "beta", 1, 60)
	placed := f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if placed.Status.MemoryLimitMiB != 256<<10 || placed.Status.MilliCPUs != 28000 {
		t.Errorf("a one-GPU execution under an agreement without caps: %d MiB, %d milli-CPUs, want %d, 28000",
			placed.Status.MemoryLimitMiB, placed.Status.MilliCPUs, 256<<10)
	}
	// The node's memory and CPUs unknown: nothing more is placed there.
	forgeNodeInEtcd(t, s, "gpu-00", func(n *nodusv1.Node) { n.Status.Inventory.MemoryMiB, n.Status.Inventory.CPU = 0, 0 })
	waitNode(t, s, "gpu-00", func(n *nodusv1.Node) bool { return n.Status.Inventory.MemoryMiB == 0 })
	// The scheduler places from its informer's copy of the node, which may
	// not have the forged one yet when the API shows it (CI saw that once):
	// an execution placed then was placed on the inventory from before,
	// the ordinary staleness of a copy, and the next one comes later. Three
	// tries at most: with the first execution's, four is what the host
	// lends (GPUs, executions), so the last one can only wait for the
	// inventory, not for room.
	var got *nodusv1.Execution
	for try := 1; try <= 3; try++ {
		waiting := f.submit(t, "beta", 1, 60)
		got = f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool {
			return e.Status.Reason == "Waiting" || e.Status.Phase != nodusv1.ExecutionPending
		})
		if got.Status.Phase == nodusv1.ExecutionPending {
			break
		}
		t.Logf("try %d placed on the scheduler's copy of the node from before the forge: %s", try, got.Status.Phase)
		time.Sleep(time.Second)
	}
	if got.Status.Phase != nodusv1.ExecutionPending {
		t.Errorf("an execution on a host lent without caps whose inventory is unknown: %s, limits %d MiB, %d milli-CPUs",
			got.Status.Phase, got.Status.MemoryLimitMiB, got.Status.MilliCPUs)
	}
}

// TestLendingAHostWhoseNodeWasDeletedSaysSo: an operator deleted the node
// under an owner's reservation. Lending it again cannot work, and the
// answer says why: not "reservedhost not found" of a host the owner still
// sees, but the node's deletion, with its registered reason and a fix.
func TestLendingAHostWhoseNodeWasDeletedSaysSo(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	deleteGoneNode(t, s, "gpu-00")
	r := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d}`, epoch), "Idempotency-Key", "lend-gone")
	env := envelopeOf(t, r)
	if r.code != http.StatusConflict || env.Reason != apierror.ReasonNodeNotFound || !strings.Contains(env.Message, "deleted") || !strings.Contains(env.Fix, "release") {
		t.Errorf("lending a host whose node was deleted: %d %s", r.code, r.body)
	}
	// Its answer replayed is the same, its fix with it.
	replay := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d}`, epoch), "Idempotency-Key", "lend-gone")
	if again := envelopeOfReplay(t, replay); replay.header.Get("Idempotent-Replayed") != "true" || again.Fix != env.Fix {
		t.Errorf("the replayed answer's fix: %q, first %q", again.Fix, env.Fix)
	}
	if l := f.reservation(t, "gpu-00").Status.Lending; l != nil && l.Lent {
		t.Errorf("the host was lent: %+v", l)
	}
}

// TestLendingSharesMemoryAndCPUs: what an owner lends bounds its borrowers'
// sandboxes. By default a host lends memory and CPUs in proportion to the
// GPUs lent; an owner may say how much, never more than the host has; each
// execution gets its share by GPUs, and the HostLending shows the whole.
func TestLendingSharesMemoryAndCPUs(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	// Half of the 8 GPUs: half of the host's 2 TiB and 224 CPUs.
	r := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d,"maxGPUs":4}`, epoch))
	var lent nodusv1.HostLending
	if r.code != 200 || json.Unmarshal(r.body, &lent) != nil || lent.Status.MemoryMiB != 1<<20 || lent.Status.MilliCPUs != 112000 {
		t.Fatalf("the default share: %d %s", r.code, r.body)
	}
	for what, body := range map[string]string{
		"more memory than the host has": fmt.Sprintf(`{"epoch":%d,"memoryMiB":%d}`, epoch, 3<<20),
		"more CPUs than the host has":   fmt.Sprintf(`{"epoch":%d,"milliCPUs":%d}`, epoch, 225000),
		"less than one execution needs": fmt.Sprintf(`{"epoch":%d,"memoryMiB":1}`, epoch),
	} {
		if r := f.lend(t, f.admin, "lend", "gpu-00", body); r.code != http.StatusUnprocessableEntity {
			t.Errorf("lending %s: %d %s", what, r.code, r.body)
		}
	}
	r = f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d,"maxGPUs":4,"memoryMiB":65536,"milliCPUs":16000}`, epoch))
	if r.code != 200 || json.Unmarshal(r.body, &lent) != nil || lent.Status.MemoryMiB != 65536 || lent.Status.MilliCPUs != 16000 {
		t.Fatalf("lending 64 GiB and 16 CPUs: %d %s", r.code, r.body)
	}
	// A one-GPU execution of four lent GPUs gets a quarter.
	e := f.submit(t, "beta", 1, 60)
	placed := f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if placed.Status.MemoryLimitMiB != 16384 || placed.Status.MilliCPUs != 4000 {
		t.Errorf("a one-GPU execution's limits: %d MiB, %d milli-CPUs", placed.Status.MemoryLimitMiB, placed.Status.MilliCPUs)
	}
	if placed.Status.Network != nodusv1.LendingNetworkNone {
		t.Errorf("a pool without a network policy gives network %q, want none", placed.Status.Network)
	}
	// The pool's network policy travels with each placement.
	pool, err := s.Client.NodusV1().Pools().Get(ctx(t), "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := pool.DeepCopy()
	bad.Spec.Lending.Network = "everywhere"
	if _, err := s.Client.NodusV1().Pools().Update(ctx(t), bad, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a network policy that does not exist: %v", err)
	}
	// placedAfter sets the pool's network policy and places one more
	// execution right after.
	placedAfter := func(network nodusv1.LendingNetwork) *nodusv1.Execution {
		t.Helper()
		f.changePool(t, func(l *nodusv1.PoolLending) { l.Network = network })
		e := f.submit(t, "beta", 1, 60)
		return f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	}
	if placed := placedAfter(nodusv1.LendingNetworkEgress); placed.Status.Network != nodusv1.LendingNetworkEgress {
		t.Errorf("an execution in an egress pool: network %q", placed.Status.Network)
	}
	// Tightening applies to the very next placement: the scheduler's cache
	// may not have seen the change yet, etcd has.
	if placed := placedAfter(nodusv1.LendingNetworkNone); placed.Status.Network != nodusv1.LendingNetworkNone {
		t.Errorf("an execution placed after the pool went back to none: network %q", placed.Status.Network)
	}
	// An execution waiting for GPUs (5 of the 4 lent) is never placed once
	// the pool stops lending: it says why it waits.
	waiting := f.submit(t, "beta", 5, 60)
	f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool { return e.Status.Reason == "Waiting" })
	f.changePool(t, func(l *nodusv1.PoolLending) { l.Open = false })
	closed := f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool {
		return strings.Contains(e.Status.Message, "no longer lends")
	})
	if closed.Status.Phase != nodusv1.ExecutionPending {
		t.Errorf("an execution after its pool stopped lending: %s %q", closed.Status.Phase, closed.Status.Message)
	}
}

// TestAFormerOwnersHostLendingShowsNothingOfTheNext: a node's former
// owner lent it, released it, and the node went to another project, which
// lends it too. When the next owner withdraws while a borrower's execution
// still runs there, that execution is the next owner's to see (it drains),
// never the former owner's: whichever of the two reservations a pass reads
// first.
func TestAFormerOwnersHostLendingShowsNothingOfTheNext(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, true)
	c := s.Client.NodusV1()
	node := "gpu-00"
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":8}`, f.reservation(t, node).Status.Epoch)); r.code != 200 {
		t.Fatalf("acme lends: %d %s", r.code, r.body)
	}
	// acme releases; the node is drained and cleaned.
	if r := f.release(t, f.admin, node, agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	final := f.reservation(t, node).Status.Epoch
	if r := f.heartbeat(t, node, nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence(node, final, 0, 0)}}); r.code != 200 {
		t.Fatalf("drain heartbeat: %d %s", r.code, r.body)
	}
	cleaning := waitNode(t, s, node, func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil
	})
	if r := f.heartbeat(t, node, nodusv1.NodeHeartbeat{AgentGeneration: 1, Cleaning: &nodusv1.CleaningEvidence{
		Request: cleaning.Status.Cleaning.Request, AppliedEpoch: final, Succeeded: true}}); r.code != 200 {
		t.Fatalf("cleaning evidence: %d %s", r.code, r.body)
	}
	// other's reservation takes the node and lends it.
	now := time.Now()
	if err := testfleet.Reserve(ctx(t), s.Client, "next", "other", nodusv1.ReservationPlacement{Node: node}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "next", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateActive, nil
	}); err != nil {
		t.Fatal("other's reservation never became active on the cleaned node")
	}
	nextLend := func(action string) response {
		return do(t, f.outsider, "POST", "/apis/nodus.dev/v1/namespaces/other/reservedhosts/next/"+action, "application/json",
			strings.NewReader(fmt.Sprintf(`{"epoch":%d,"maxGPUs":8}`, f.reservation(t, "next").Status.Epoch)))
	}
	if r := nextLend("lend"); r.code != 200 {
		t.Fatalf("other lends: %d %s", r.code, r.body)
	}
	e := f.submit(t, "beta", 2, 600)
	f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := f.report(t, node, "beta", e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("running: %d %s", r.code, r.body)
	}
	if r := nextLend("withdraw"); r.code != 200 {
		t.Fatalf("other withdraws: %d %s", r.code, r.body)
	}
	// The execution drains on other's host; acme's shows it idle, pass after pass.
	waitLending := func(project, name string, ok func(*nodusv1.HostLending) bool) {
		t.Helper()
		if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
			l, err := c.HostLendings(project).Get(cx, name, metav1.GetOptions{})
			return err == nil && ok(l), nil
		}); err != nil {
			t.Fatalf("the HostLending %s/%s never got there", project, name)
		}
	}
	waitLending("other", "next", func(l *nodusv1.HostLending) bool { return l.Status.BorrowedGPUs == 2 && l.Status.Executions == 1 })
	for i := range 30 {
		// A scheduler pass each time (a pool event triggers one), so that
		// both reservations get read first in turn.
		if _, err := c.Pools().Patch(ctx(t), "gpu", types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"tick":"%d"}}}`, i)),
			metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		l, err := c.HostLendings("acme").Get(ctx(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Status.BorrowedGPUs != 0 || l.Status.Executions != 0 || len(l.Status.Borrowers) != 0 || len(l.Status.GPUIndices) != 0 {
			t.Fatalf("acme's HostLending, released before, shows other's borrower: %+v", l.Status)
		}
	}
}
