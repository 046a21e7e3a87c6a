package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnAgentReadsNoEarlierBorrowersRun: an agent's credential reads only
// the executions its host runs now (a tenant with root there may hold a
// copy). Asked for an older revision, a list (resourceVersionMatch Exact)
// or a watch replayed the executions that ran there, their command and
// environment, from etcd's history and the watch cache's.
func TestAnAgentReadsNoEarlierBorrowersRun(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	const node = "gpu-00"
	agent := versioned.NewForConfigOrDie(f.agents[node]).NodusV1().Executions("")
	onHost := metav1.ListOptions{FieldSelector: "status.host=" + f.aliases[node]}
	before, err := agent.List(ctx(t), onHost)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d}`, f.reservation(t, node).Status.Epoch)); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	// As `kubectl apply` makes it: its annotation holds the spec again.
	placed, err := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta").Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Labels: map[string]string{"team": "vision"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"command":["train"]}}`}},
		Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := f.waitExecution(t, "beta", placed.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	zero := int32(0)
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: &zero, Reason: "Exited"}); r.code != 200 {
		t.Fatalf("report succeeded: %d %s", r.code, r.body)
	}
	f.waitExecution(t, "beta", placed.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionSucceeded })
	revealed := func(e *nodusv1.Execution) bool {
		return e.UID == placed.UID && (len(e.Spec.Command) > 0 || len(e.Annotations) > 0 || len(e.Labels) > 0 || len(e.ManagedFields) > 0)
	}

	// Its list at the revision it was placed at, from etcd's history.
	exact := onHost
	exact.ResourceVersion, exact.ResourceVersionMatch = running.ResourceVersion, metav1.ResourceVersionMatchExact
	list, err := agent.List(ctx(t), exact)
	if err != nil {
		t.Fatalf("a list at resourceVersion %s: %v", running.ResourceVersion, err)
	}
	for i := range list.Items {
		if revealed(&list.Items[i]) {
			t.Errorf("a list at resourceVersion %s showed the finished execution's command: %v", running.ResourceVersion, list.Items[i].Spec.Command)
		}
	}
	// Its watch from before it was placed, from the watch cache.
	from := onHost
	from.ResourceVersion = before.ResourceVersion
	w, err := agent.Watch(ctx(t), from)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// It is told that the execution left (by UID: it may run it still),
	// and nothing of what it ran.
	for timeout := time.After(10 * time.Second); ; {
		select {
		case e := <-w.ResultChan():
			x, ok := e.Object.(*nodusv1.Execution)
			if ok && revealed(x) {
				t.Errorf("a watch from resourceVersion %s showed the finished execution in a %s event: %v %v", before.ResourceVersion, e.Type, x.Spec.Command, x.Annotations)
			}
			if e.Type == watch.Error {
				t.Fatalf("the watch ended: %+v", e.Object)
			}
			if ok && e.Type == watch.Deleted && x.UID == placed.UID {
				return
			}
		case <-timeout:
			t.Fatal("the watch from before the execution did not say it left")
		}
	}
}

// TestAnAgentReadsOnlyTheReservationItServesNow: an agent's credential
// reads the reservations whose access its node applies now (active,
// releasing, ending), not an earlier tenant's once it was released nor the
// next tenant's while it waits for the node: a tenant with root may have
// copied the credential, and each names a project, its login user and its
// term. Until session 52 the agent listed every reservation ever placed on
// its node, and a list or watch from a past revision replayed them.
func TestAnAgentReadsOnlyTheReservationItServesNow(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	const node = "gpu-00"
	agentClient := versioned.NewForConfigOrDie(f.agents[node])
	agent := agentClient.NodusV1().Reservations()
	onNode := metav1.ListOptions{FieldSelector: "status.node=" + node}
	names := func(opts metav1.ListOptions) map[string]nodusv1.ReservationState {
		t.Helper()
		list, err := agent.List(ctx(t), opts)
		if err != nil {
			t.Fatalf("the agent's list (resourceVersion %q): %v", opts.ResourceVersion, err)
		}
		seen := map[string]nodusv1.ReservationState{}
		for _, r := range list.Items {
			seen[r.Name] = r.Status.State
		}
		return seen
	}
	active := names(onNode)
	if len(active) != 1 || active[node] != nodusv1.ReservationStateActive {
		t.Fatalf("the agent does not read the reservation it serves: %v", active)
	}
	whileActive, err := agent.List(ctx(t), onNode)
	if err != nil {
		t.Fatal(err)
	}

	epoch := f.reservation(t, node).Status.Epoch
	if r := f.release(t, f.admin, node, fmt.Sprintf(`{"agreed":true,"epoch":%d}`, epoch), ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	if got := names(onNode); len(got) != 1 || got[node] != nodusv1.ReservationStateReleasing {
		t.Fatalf("the agent does not read the release it must apply: %v", got)
	}
	// The next tenant queues for the node while it is cleaned.
	cleaning := cleanForNext(t, s, agentClient, node, epoch+1)
	waitReservation(t, s, "next", func(r *nodusv1.Reservation) bool {
		placed := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return r.Status.State == nodusv1.ReservationStatePending && placed != nil && placed.Reason == string(apierror.ReasonNodeCleaning)
	})
	if got := names(onNode); len(got) != 0 {
		t.Errorf("between tenants the agent reads %v", got)
	}
	// Nor from history: a list at the revision the first tenant was active.
	exact := onNode
	exact.ResourceVersion, exact.ResourceVersionMatch = whileActive.ResourceVersion, metav1.ResourceVersionMatchExact
	if got := names(exact); len(got) != 0 {
		t.Errorf("a list at resourceVersion %s read %v", whileActive.ResourceVersion, got)
	}
	// Nor a watch from then: it is told that the reservation left, by name
	// and UID, and nothing of it.
	from := onNode
	from.ResourceVersion = whileActive.ResourceVersion
	w, err := agent.Watch(ctx(t), from)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	revealed := func(r *nodusv1.Reservation) bool {
		return r.Spec.Project != "" || r.Spec.LoginUser != "" || r.Status.State != "" || r.Status.LoginUser != "" || len(r.ManagedFields) > 0
	}
	left := false
	for timeout, quiet := time.After(10*time.Second), time.After(3*time.Second); !left || quiet != nil; {
		select {
		case e := <-w.ResultChan():
			r, ok := e.Object.(*nodusv1.Reservation)
			if e.Type == watch.Error {
				t.Fatalf("the watch ended: %+v", e.Object)
			}
			if ok && revealed(r) {
				t.Errorf("a watch from resourceVersion %s showed reservation %s (%s) in a %s event", from.ResourceVersion, r.Name, r.Status.State, e.Type)
			}
			left = left || (ok && e.Type == watch.Deleted && r.Name == node)
		case <-quiet:
			quiet = nil // what else the watch replays has come by now
		case <-timeout:
			t.Fatalf("the watch from resourceVersion %s did not say that %s left (left: %v)", from.ResourceVersion, node, left)
		}
	}

	// The cleaned node is the next tenant's: its agent reads it.
	if err := testfleet.Heartbeat(ctx(t), agentClient, node, nodusv1.NodeHeartbeat{AgentGeneration: 1,
		Cleaning: &nodusv1.CleaningEvidence{Request: cleaning.Request, AppliedEpoch: cleaning.Epoch, Succeeded: true}}); err != nil {
		t.Fatalf("the cleaning's heartbeat: %v", err)
	}
	waitReservation(t, s, "next", func(r *nodusv1.Reservation) bool { return r.Status.State == nodusv1.ReservationStateActive })
	if got := names(onNode); len(got) != 1 || got["next"] != nodusv1.ReservationStateActive {
		t.Errorf("the agent does not read the next tenant's reservation it serves: %v", got)
	}
}

// TestTheNextTenantReadsNothingOfTheLastOnItsNode: once the next tenant
// holds the node, its agent's credential (which that tenant, root there,
// may have copied) reads nothing of the tenant before on its own Node: not
// in the last cleaning's record (the reservation it cleaned after, its
// login users, the steps, the clean command's output), not from the
// store's history (a list at a past revision, a watch from one, which
// replayed the earlier claim and the cleaning as it was asked). Until
// session 53 the record kept all of it, and history was open.
func TestTheNextTenantReadsNothingOfTheLastOnItsNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	const node = "gpu-00"
	agentClient := versioned.NewForConfigOrDie(f.agents[node])
	nodes := agentClient.NodusV1().Nodes()
	own := metav1.ListOptions{FieldSelector: "metadata.name=" + node}
	first := f.reservation(t, node)
	whileFirst, err := nodes.List(ctx(t), own)
	if err != nil {
		t.Fatal(err)
	}
	if len(whileFirst.Items) != 1 || whileFirst.Items[0].Status.ReservationUID != first.UID {
		t.Fatalf("the agent's list of its node while the first tenant holds it: %+v", whileFirst.Items)
	}

	if r := f.release(t, f.admin, node, fmt.Sprintf(`{"agreed":true,"epoch":%d}`, first.Status.Epoch), ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	cleaning := cleanForNext(t, s, agentClient, node, first.Status.Epoch+1)
	// What the cleaning of the first tenant's accounts reports names them
	// and what they left.
	const left = "first-tenant-checkpoints"
	if err := testfleet.Heartbeat(ctx(t), agentClient, node, nodusv1.NodeHeartbeat{AgentGeneration: 1,
		Cleaning: &nodusv1.CleaningEvidence{Request: cleaning.Request, AppliedEpoch: cleaning.Epoch, Succeeded: true,
			Steps:         []string{"ended every process of ubuntu", "removed 3 keys from the kernel keyrings of ubuntu"},
			CommandOutput: "removed /srv/" + left}}); err != nil {
		t.Fatalf("the cleaning's heartbeat: %v", err)
	}
	waitReservation(t, s, "next", func(r *nodusv1.Reservation) bool { return r.Status.State == nodusv1.ReservationStateActive })
	// The operators' copy of the report.
	if logged := testserver.Logged(left); len(logged) != 1 || !strings.Contains(logged[0], `reservation="gpu-00"`) ||
		!strings.Contains(logged[0], "kernel keyrings of ubuntu") {
		t.Errorf("the server's log of the cleaning's report: %q", logged)
	}

	// The node as it is now, as each of the agent's reads shows it.
	revealed := func(read string, body []byte) {
		t.Helper()
		var n nodusv1.Node
		if err := json.Unmarshal(body, &n); err != nil {
			t.Fatalf("%s: %v: %s", read, err, body)
		}
		if n.Status.Reservation != "next" {
			t.Fatalf("%s: the node is not the next tenant's: %+v", read, n.Status)
		}
		c := n.Status.Cleaning
		if c == nil || c.Phase != nodusv1.CleaningSucceeded || c.Request != cleaning.Request {
			t.Errorf("%s: the node shows no record of its last cleaning: %+v", read, c)
		} else if c.Reservation != "" || len(c.Users) > 0 || len(c.Steps) > 0 || c.CommandOutput != "" || c.Message != "" {
			t.Errorf("%s: the last cleaning's record names the tenant before: %+v", read, c)
		}
		for _, s := range []string{string(first.UID), left, "keyrings"} {
			if strings.Contains(string(body), s) {
				t.Errorf("%s shows %q of the tenant before: %s", read, s, body)
			}
		}
	}
	api := agentClient.NodusV1().RESTClient()
	for _, read := range []struct {
		name string
		req  func() ([]byte, error)
	}{
		{"GET of the node", func() ([]byte, error) { return api.Get().Resource("nodes").Name(node).DoRaw(ctx(t)) }},
		{"GET of its status", func() ([]byte, error) {
			return api.Get().Resource("nodes").Name(node).SubResource("status").DoRaw(ctx(t))
		}},
	} {
		body, err := read.req()
		if err != nil {
			t.Fatalf("%s: %v", read.name, err)
		}
		revealed(read.name, body)
	}
	list, err := nodes.List(ctx(t), own)
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the agent's list of its node: %v %+v", err, list)
	}
	item, err := json.Marshal(list.Items[0])
	if err != nil {
		t.Fatal(err)
	}
	revealed("a list of the node", item)

	// Nor from the store's history: the node as the first tenant held it.
	exact := own
	exact.ResourceVersion, exact.ResourceVersionMatch = whileFirst.ResourceVersion, metav1.ResourceVersionMatchExact
	if old, err := nodes.List(ctx(t), exact); !apierrors.IsGone(err) {
		t.Errorf("a list at resourceVersion %s: %v, not Gone (410): %+v", exact.ResourceVersion, err, old)
	}
	from := own
	from.ResourceVersion = whileFirst.ResourceVersion
	w, err := nodes.Watch(ctx(t), from)
	if err == nil {
		defer w.Stop()
		for timeout := time.After(3 * time.Second); err == nil; {
			select {
			case e, open := <-w.ResultChan():
				if !open {
					err = fmt.Errorf("the watch ended without an error")
					break
				}
				if e.Type == watch.Error {
					err = apierrors.FromObject(e.Object)
				}
				if n, ok := e.Object.(*nodusv1.Node); ok && (n.Status.ReservationUID == first.UID || (n.Status.Cleaning != nil && n.Status.Cleaning.Reservation != "")) {
					t.Errorf("a watch from resourceVersion %s replayed the node in a %s event as the tenant before had it: %+v", from.ResourceVersion, e.Type, n.Status)
				}
			case <-timeout:
				err = fmt.Errorf("the watch went on")
			}
		}
	}
	if !apierrors.IsGone(err) {
		t.Errorf("a watch from resourceVersion %s: %v, not Gone (410)", from.ResourceVersion, err)
	}

	// As its informer reads it: a list, then a watch from the list's
	// revision, which is the node's present (tried again should the node
	// change between the two).
	for try := 1; ; try++ {
		list, err := nodes.List(ctx(t), own)
		if err != nil {
			t.Fatal(err)
		}
		from.ResourceVersion = list.ResourceVersion
		w, err := nodes.Watch(ctx(t), from)
		if err == nil {
			w.Stop()
			break
		}
		if !apierrors.IsGone(err) || try == 3 {
			t.Fatalf("a watch from the revision of the list before it: %v", err)
		}
	}
}

// cleanForNext reports, as node's agent, the release applied at epoch
// (its final one) and drained, waits for the node's cleaning request, and
// queues project beta's reservation "next" for the node; it returns the
// request.
func cleanForNext(t *testing.T, s *testserver.Server, agent versioned.Interface, node string, epoch int64) *nodusv1.NodeCleaning {
	t.Helper()
	if err := testfleet.Heartbeat(ctx(t), agent, node, nodusv1.NodeHeartbeat{AgentGeneration: 1,
		Reservations: []nodusv1.ReservationEvidence{evidence(node, epoch, 0, 0)}}); err != nil {
		t.Fatalf("the drained release's heartbeat: %v", err)
	}
	cleaning := waitNode(t, s, node, func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil
	}).Status.Cleaning
	now := time.Now()
	if err := testfleet.Reserve(ctx(t), s.Client, "next", "beta", nodusv1.ReservationPlacement{Node: node}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	return cleaning
}
