package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAReservationWhoseNodeWasTakenEnds: an operator deletes a held node
// (nodus.dev/delete-uncleaned), the machine is enrolled again under its
// name, and another customer's reservation placed on that name claims it
// first. The earlier reservation, still active with status.node naming the
// node, kept its access there: the node's agent applied both tenants'
// access at once. It must end (a new epoch, which the agent applies), say
// why, show nothing of the node that is another's now, and leave the other
// reservation's claim alone.
func TestAReservationWhoseNodeWasTakenEnds(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	first := f.host(t, "taken", now.Add(-time.Hour), now.Add(time.Hour))
	deleteGoneNode(t, s, "taken")
	taker, err := c.Reservations().Create(ctx(t), testfleet.Reservation("taker", "other", nodusv1.ReservationPlacement{Node: "taken"},
		now.Add(-time.Hour), now.Add(time.Hour)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testfleet.Node(ctx(t), s.Client, "taken", "fra1", "gpu-h100x8", "ubuntu"); err != nil {
		t.Fatal(err)
	}
	// Whichever of the two the controller let claim the new node first
	// (the earlier one takes a node without a claim, as one written before
	// claims existed), the taker's claim is the one that landed.
	forgeNodeInEtcd(t, s, "taken", func(n *nodusv1.Node) {
		n.Status.Reservation, n.Status.ReservationUID = taker.Name, taker.UID
		n.Status.ProvisionState = nodusv1.ProvisionStateActive
		n.Status.AgentGeneration, n.Status.SSHHostKey, n.Status.SSHAddress = 1, testfleet.HostKey("taken again"), "192.0.2.76:22"
	})
	waitReservation(t, s, "taker", func(r *nodusv1.Reservation) bool { return r.Status.State == nodusv1.ReservationStateActive })

	ending := waitReservation(t, s, "taken", func(r *nodusv1.Reservation) bool {
		return r.Status.State == nodusv1.ReservationStateEnding
	})
	if ending.Status.Epoch != first.Status.Reservation.Epoch+1 {
		t.Errorf("ending at epoch %d, want %d: the agent retires access by a new epoch", ending.Status.Epoch, first.Status.Reservation.Epoch+1)
	}
	if p := meta.FindStatusCondition(ending.Status.Conditions, "Placed"); p == nil || p.Reason != string(apierror.ReasonNodeLost) || p.Status != metav1.ConditionFalse {
		t.Errorf("the Placed condition of the reservation that lost its node: %+v", p)
	}
	host := f.waitHost(t, "taken", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateEnding
	})
	if e := meta.FindStatusCondition(host.Status.Conditions, nodusv1.ReservedHostConditionEligible); e == nil || e.Reason != string(apierror.ReasonNodeLost) {
		t.Errorf("the customer's host does not say why its access ended: %+v", e)
	}
	if host.Status.Connect != nil {
		t.Errorf("the customer's host still shows how to connect to a machine that is another's: %+v", host.Status.Connect)
	}

	// The agent there applied the new epoch: its reservation ends, the
	// node stays the taker's. The sessions and executions it counts are
	// the taker's (an account both used; applying the retirement ended all
	// of the account's sessions once): they do not hold the end.
	if r := f.heartbeat(t, "taken", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{
		evidence("taken", ending.Status.Epoch, 2, 1), evidence("taker", 1, 2, 1)}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	waitReservation(t, s, "taken", func(r *nodusv1.Reservation) bool { return r.Status.State == nodusv1.ReservationStateEnded })
	time.Sleep(time.Second) // a handover, if any, would follow the end
	node, err := c.Nodes().Get(ctx(t), "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Status.Reservation != "taker" || node.Status.ReservationUID != taker.UID || node.Status.Cleaning != nil {
		t.Errorf("the end of the reservation that lost the node touched the taker's claim: %+v", node.Status)
	}
	if r, err := c.Reservations().Get(ctx(t), "taker", metav1.GetOptions{}); err != nil || r.Status.State != nodusv1.ReservationStateActive {
		t.Errorf("the taker: %v %+v", err, r)
	}
	ended, err := c.Reservations().Get(ctx(t), "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := meta.FindStatusCondition(ended.Status.Conditions, "Placed"); p == nil || p.Reason != string(apierror.ReasonNodeLost) {
		t.Errorf("the ended reservation forgot why it ended: %+v", p)
	}
}

// waitReservation waits until reservation name satisfies ok.
func waitReservation(t *testing.T, s *testserver.Server, name string, ok func(*nodusv1.Reservation) bool) *nodusv1.Reservation {
	t.Helper()
	return waitUntil(t, "reservation "+name, func(c context.Context) (*nodusv1.Reservation, error) {
		return s.Client.NodusV1().Reservations().Get(c, name, metav1.GetOptions{})
	}, ok)
}

// waitUntil waits until the object get reads satisfies ok; a read that
// fails counts as not yet.
func waitUntil[T any](t *testing.T, what string, get func(context.Context) (T, error), ok func(T) bool) T {
	t.Helper()
	var last T
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		obj, err := get(c)
		if err != nil {
			return false, nil
		}
		last = obj
		return ok(obj), nil
	}); err != nil {
		t.Fatalf("%s never reached the expected state; last seen: %+v", what, last)
	}
	return last
}

// TestAReplacementTheReservationHasNotClaimedIsNotItsMachine: an operator
// deletes a held node (nodus.dev/delete-uncleaned) and enrolls another
// machine under its name, in maintenance, so that the reservation still
// active on the name cannot claim it. The reservation stays active (its
// machine may come back to it), but the new machine is not its tenant's:
// no certificate for it, nothing of it on the customer's host, no lending
// placed on it. Before, access followed the node's name: the tenant got a
// certificate with the new machine's address and its host showed how to
// connect there.
func TestAReplacementTheReservationHasNotClaimedIsNotItsMachine(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	before := f.host(t, "swapped", now.Add(-time.Hour), now.Add(time.Hour))
	if before.Status.Connect == nil {
		t.Fatalf("the host never showed how to connect: %+v", before.Status)
	}
	deleteGoneNode(t, s, "swapped")
	n, err := c.Nodes().Create(ctx(t), &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "swapped"},
		Spec: nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu", Maintenance: true, MaintenanceReason: "burn-in"}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.AgentGeneration, n.Status.SSHHostKey, n.Status.SSHAddress = 1, testfleet.HostKey("another machine"), "192.0.2.77:22"
	if _, err := c.Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReservation(t, s, "swapped", func(r *nodusv1.Reservation) bool {
		p := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return p != nil && p.Reason == string(apierror.ReasonNodeInMaintenance)
	})
	if r := f.reservation(t, "swapped"); r.Status.State != nodusv1.ReservationStateActive || r.Status.Epoch != before.Status.Reservation.Epoch {
		t.Errorf("the reservation: %s at epoch %d, want still active at %d", r.Status.State, r.Status.Epoch, before.Status.Reservation.Epoch)
	}

	body, _ := json.Marshal(map[string]string{"publicKey": testfleet.HostKey("mary's laptop")})
	if r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/swapped/ssh-certificate", "application/json",
		strings.NewReader(string(body))); r.code != http.StatusConflict || !strings.Contains(string(r.body), `"reason":"NodeNotFound"`) || strings.Contains(string(r.body), "192.0.2.77") {
		t.Errorf("a certificate for a machine the reservation has not claimed: %d %s", r.code, r.body)
	}
	// The controller writes the host after the reservation's blocker: once
	// it shows no way to connect, it stays so, and says why.
	f.waitHost(t, "swapped", func(h *nodusv1.ReservedHost) bool { return h.Status.Connect == nil })
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		host, err := c.ReservedHosts("acme").Get(ctx(t), "swapped", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if host.Status.Connect != nil {
			t.Fatalf("the customer's host shows how to connect to a machine its reservation has not claimed: %+v", host.Status.Connect)
		}
		if cond := meta.FindStatusCondition(host.Status.Conditions, nodusv1.ReservedHostConditionConnected); cond == nil || !strings.Contains(cond.Message, "replaced") {
			t.Fatalf("the host does not say its machine was replaced: %+v", cond)
		}
	}
}

// TestAnAgentServesOnlyTheReservationItsNodeIsClaimedBy: the agent lists
// the reservations placed on its node's name, and a machine enrolled under
// the name of one the operator deleted lists that one's reservation, still
// active. Here the agent's node loses the claim underneath (as the new
// machine's Node never had it) while in maintenance, so that the
// reservation cannot take it again: the agent must stop serving the
// tenant's principal. Before, it served the principal of every active
// reservation that named the node.
func TestAnAgentServesOnlyTheReservationItsNodeIsClaimedBy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent manages a login account (CI runs as root)")
	}
	login := loginAccount(t)
	s, _, _, principals := servedAgentOf(t, "claimed", login)
	nodes := s.Client.NodusV1().Nodes()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx(t), "claimed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Maintenance = true
		_, err = nodes.Update(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	forgeNodeInEtcd(t, s, "claimed", func(n *nodusv1.Node) { n.Status.Reservation, n.Status.ReservationUID = "", "" })
	waitReservation(t, s, "claimed", func(r *nodusv1.Reservation) bool {
		p := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return r.Status.State == nodusv1.ReservationStateActive && p != nil && p.Reason == string(apierror.ReasonNodeInMaintenance)
	})
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return principals(login) == "", nil }); err != nil {
		t.Errorf("the agent serves the principal of a reservation its node's claim does not name: %q", principals(login))
	}
}

// TestNothingIsPlacedOnAMachineTheLenderHasNotClaimed: the lending
// scheduler placed borrowers' executions on the node a lent reservation
// names, held or not: a machine enrolled under a deleted node's name,
// which the reservation could not claim (here it is being cleaned), ran
// them.
func TestNothingIsPlacedOnAMachineTheLenderHasNotClaimed(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 4}, false)
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	if r := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d,"maxGPUs":2}`, epoch)); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	forgeNodeInEtcd(t, s, "gpu-00", func(n *nodusv1.Node) {
		n.Status.Reservation, n.Status.ReservationUID = "", ""
		n.Status.ProvisionState = nodusv1.ProvisionStateCleaning
		n.Status.Cleaning = &nodusv1.NodeCleaning{Request: 1, Phase: nodusv1.CleaningPending, RequestedAt: metav1.Now()}
	})
	waitReservation(t, s, "gpu-00", func(r *nodusv1.Reservation) bool {
		p := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return r.Status.State == nodusv1.ReservationStateActive && p != nil && p.Reason == string(apierror.ReasonNodeCleaning)
	})
	e := f.submit(t, "beta", 1, 60)
	time.Sleep(3 * time.Second) // a placement takes milliseconds
	got, err := s.Client.NodusV1().Executions("beta").Get(ctx(t), e.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != nodusv1.ExecutionPending || got.Status.Host != "" {
		t.Errorf("an execution was placed on a machine the lender has not claimed: %s on %q", got.Status.Phase, got.Status.Host)
	}
}

// TestABorrowerOnAHostWhoseClaimLeftIsEnded: a lent host's node loses its
// reservation's claim (the operator deleted it and enrolled the machine
// again under its name, here the claim taken away in etcd) while a
// borrower's execution runs there. The reservation still names the node
// and still shows it lent, but the machine is no longer the lender's to
// lend: its agent ends what runs under the agreement, on the host itself.
func TestABorrowerOnAHostWhoseClaimLeftIsEnded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a borrower account of its own, whose processes the agent ends (CI runs as root)")
	}
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	if _, err := c.Projects().Create(ctx(t), project("beta", nodusv1.ProjectMember{Name: "m-beta", Role: nodusv1.ProjectRoleMember}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pools().Patch(ctx(t), "fra1", types.MergePatchType,
		[]byte(`{"spec":{"lending":{"open":true,"borrowers":[{"project":"beta","maxGPUs":0}]}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	enrollAgent(t, s, "lender", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: loginAccount(t)}, dir)
	borrower := borrowerAccount(t)
	// Under the system's temporary directory, which the borrower account
	// may pass through (a test's own is closed to other accounts).
	workRoot, err := os.MkdirTemp("", "nodus-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(workRoot) })
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Socket: filepath.Join(dir, "p.sock"),
		BorrowerUser: borrower, Sandbox: agent.SandboxNone, ExecutionsDir: workRoot})
	f.reserve(t, "lender", nodusv1.ReservationPlacement{Node: "lender"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	// Lent once its agent reported the host's inventory: the agreement's share.
	epoch := f.waitHost(t, "lender", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive && h.Status.Inventory.MemoryMiB > 0
	}).Status.Reservation.Epoch
	if r := do(t, f.admin, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/lender/lend", "application/json",
		strings.NewReader(fmt.Sprintf(`{"epoch":%d}`, epoch))); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	executions := versioned.NewForConfigOrDie(tokenFor(t, s, "m-beta")).NodusV1().Executions("beta")
	e, err := executions.Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "long-"},
		Spec:       nodusv1.ExecutionSpec{Pool: "fra1", Command: []string{"sleep", "300"}, MaxRuntimeSeconds: 600}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	borrowersSleep := func() bool { return exec.Command("pgrep", "-u", borrower, "-x", "sleep").Run() == nil }
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		got, err := executions.Get(c, e.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == nodusv1.ExecutionRunning && borrowersSleep(), nil
	}); err != nil {
		t.Fatalf("the borrower's execution never ran on the lent host: %v", err)
	}

	// In maintenance, so that the reservation cannot claim the node again.
	if _, err := c.Nodes().Patch(ctx(t), "lender", types.MergePatchType, []byte(`{"spec":{"maintenance":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	forgeNodeInEtcd(t, s, "lender", func(n *nodusv1.Node) { n.Status.Reservation, n.Status.ReservationUID = "", "" })
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(context.Context) (bool, error) { return !borrowersSleep(), nil }); err != nil {
		t.Error("the borrower's process runs on after the lender's claim left the host")
	}
	// Its end is reported once the process is gone.
	var got *nodusv1.Execution
	_ = testfleet.Eventually(ctx(t), 20*time.Second, func(c context.Context) (bool, error) {
		var err error
		got, err = executions.Get(c, e.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase.Finished(), nil
	})
	if got == nil {
		t.Fatal("the execution could not be read")
	}
	if got.Status.Phase != nodusv1.ExecutionDrained || !strings.Contains(got.Status.Message, "no longer holds") {
		t.Errorf("the execution whose process ended is %s (%s: %s), want drained, saying the reservation no longer holds the host",
			got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
}

// TestAFormerLenderNeitherDrainsNorStartsAnothersBorrowers: the node a
// lent reservation named is held by another reservation now (the operator
// deleted it, the machine was enrolled again and the next customer's
// reservation claimed it), and the former reservation is still active
// until a controller ends it; here no controller runs, as while the lead
// passes between replicas. The former lender's withdrawal drained the
// executions placed on the node under the new holder's agreement, and its
// lending counted for the agent's start of them.
func TestAFormerLenderNeitherDrainsNorStartsAnothersBorrowers(t *testing.T) {
	f := lentHost(t)
	etcd, err := f.s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	epoch := f.reservation(t, lentNode).Status.Epoch
	takeTheLead(t, etcd)
	forgeNodeInEtcd(t, f.s, lentNode, func(n *nodusv1.Node) {
		n.Status.Reservation, n.Status.ReservationUID = "next-customer", uuid.NewUUID()
	})
	// Placed under the holder's agreement (the scheduler is stopped; its
	// placement is written where it would write it).
	e := f.submit(t, "beta", 1, 60)
	forgeInEtcd(t, f.s, "/registry/nodus.dev/executions/beta/"+e.Name, func(x *nodusv1.Execution) {
		now := metav1.Now()
		x.Status.Phase, x.Status.Host, x.Status.GPUIndices, x.Status.ScheduledAt = nodusv1.ExecutionScheduled, f.aliases[lentNode], []int32{0}, &now
	})
	f.waitExecution(t, "beta", e.Name, func(x *nodusv1.Execution) bool { return x.Status.Phase == nodusv1.ExecutionScheduled })

	if r := f.report(t, lentNode, "beta", e.Name, nodusv1.ExecutionReport{UID: e.UID, Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusConflict ||
		!strings.Contains(string(r.body), string(apierror.ReasonHostNotLent)) {
		t.Errorf("a start under the former lender's agreement: %d %s, want 409 HostNotLent", r.code, r.body)
	}
	if r := f.lend(t, f.admin, "withdraw", lentNode, fmt.Sprintf(`{"epoch":%d}`, epoch)); r.code != http.StatusOK {
		t.Fatalf("the former lender's withdrawal: %d %s", r.code, r.body)
	}
	got, err := f.s.Client.NodusV1().Executions("beta").Get(ctx(t), e.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != nodusv1.ExecutionScheduled || got.Status.DrainRequestedAt != nil {
		t.Errorf("the holder's borrower after the former lender's withdrawal: %s (%s), drain asked at %v", got.Status.Phase, got.Status.Message, got.Status.DrainRequestedAt)
	}
}

// TestANodeSetAvailableByHandStillOwesItsCleaning: only the node's agent's
// evidence of a cleaning makes a node available after a tenant. A status
// write that set it available by hand (an operator's, a tool's, before
// such writes were refused) while the cleaning was pending let the next
// reservation claim it, the former
// tenant's account untouched. The cleaning's own record keeps it.
func TestANodeSetAvailableByHandStillOwesItsCleaning(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.node(t, "handed")
	// Handed over after a tenant, as the reservation controller leaves it.
	forgeNodeInEtcd(t, s, "handed", func(n *nodusv1.Node) {
		n.Status.ProvisionState = nodusv1.ProvisionStateCleaning
		n.Status.Cleaning = &nodusv1.NodeCleaning{Request: 1, Reservation: "earlier", Epoch: 2, Users: []string{"ubuntu"},
			Phase: nodusv1.CleaningPending, RequestedAt: metav1.Now()}
	})
	waitNode(t, s, "handed", func(n *nodusv1.Node) bool { return n.Status.Cleaning != nil })
	// An operator's status write may not (TestAnOperatorsStatusWriteMovesNoClaim);
	// one stored before that was refused, or written past the API, is.
	forgeNodeInEtcd(t, s, "handed", func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateAvailable })
	waitNode(t, s, "handed", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable })
	f.reserve(t, "handed", nodusv1.ReservationPlacement{Node: "handed"}, now.Add(-time.Minute), now.Add(time.Hour))
	next := waitReservation(t, s, "handed", func(r *nodusv1.Reservation) bool {
		return meta.FindStatusCondition(r.Status.Conditions, "Placed") != nil
	})
	if p := meta.FindStatusCondition(next.Status.Conditions, "Placed"); p.Reason != string(apierror.ReasonNodeCleaning) {
		t.Errorf("the next reservation on a node set available by hand before its cleaning: Placed %s (%s), want NodeCleaning", p.Reason, p.Message)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "handed", metav1.GetOptions{}); err != nil || n.Status.Reservation != "" {
		t.Errorf("the node's claim: %v %q, want none until its cleaning succeeded", err, n.Status.Reservation)
	}
}

// TestAnOperatorsStatusWriteMovesNoClaim: a node's claim, its cleaning and
// its provision state are the lifecycle's. An operator's status write (a
// patch, or a PUT of a manifest saved before the claim, without its
// resourceVersion) that cleared a tenant's claim let the next reservation
// claim the node with the first tenant's access still live and nothing
// cleaned; one that marked a pending cleaning succeeded handed the next
// tenant an uncleaned node. Facts an agent reports stay the operator's to
// correct.
func TestAnOperatorsStatusWriteMovesNoClaim(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "held", now.Add(-time.Hour), now.Add(time.Hour))
	nodes := s.Client.NodusV1().Nodes()
	saved, err := nodes.Get(ctx(t), "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, r response) {
		t.Helper()
		if r.code != http.StatusForbidden || envelopeOf(t, r).Reason != apierror.ReasonServerOwnedField {
			t.Errorf("%s: %d %s, want 403 ServerOwnedField", what, r.code, r.body)
		}
	}
	const status = "/apis/nodus.dev/v1/nodes/held/status"
	for _, patch := range []string{
		`{"status":{"reservation":null,"reservationUID":null}}`,
		`{"status":{"provisionState":"available"}}`,
		`{"status":{"cleaning":{"request":9,"phase":"Succeeded"}}}`,
		`{"status":{"allocation":"other","allocationUID":"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"}}`,
		`{"status":{"appliedEpoch":99}}`,
	} {
		refused("an operator's status patch "+patch, do(t, s.Config, "PATCH", status, "application/merge-patch+json", strings.NewReader(patch)))
	}
	before := saved.DeepCopy()
	before.ResourceVersion = ""
	before.Status.Reservation, before.Status.ReservationUID, before.Status.ProvisionState = "", "", nodusv1.ProvisionStateAvailable
	body, _ := json.Marshal(before)
	refused("an operator's PUT of a manifest without the claim", do(t, s.Config, "PUT", status, "application/json", strings.NewReader(string(body))))
	if n, err := nodes.Get(ctx(t), "held", metav1.GetOptions{}); err != nil || n.Status.Reservation != "held" || n.Status.ProvisionState != nodusv1.ProvisionStateActive {
		t.Errorf("the node after the refused writes: %v %q %s", err, n.Status.Reservation, n.Status.ProvisionState)
	}
	// Nor may anyone pass for the server: an operator impersonating it, or
	// a token made out to its name or group.
	for what, asServer := range map[string]*rest.Config{
		"impersonating the server": func() *rest.Config {
			cfg := rest.CopyConfig(s.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
			return cfg
		}(),
		"impersonating its group": func() *rest.Config {
			cfg := rest.CopyConfig(s.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: "ops", Groups: []string{user.SystemPrivilegedGroup}}
			return cfg
		}(),
	} {
		if r := do(t, asServer, "PATCH", status, "application/merge-patch+json", strings.NewReader(`{"status":{"reservation":null,"reservationUID":null}}`)); r.code != http.StatusForbidden {
			t.Errorf("%s, a status patch clearing the claim: %d %s, want 403", what, r.code, r.body)
		}
	}
	for _, spec := range []nodusv1.AccessTokenSpec{{User: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}},
		{User: "ops", Groups: []string{user.SystemPrivilegedGroup}}, {User: "system:kube-controller-manager"}} {
		if _, err := s.Client.NodusV1().AccessTokens().Create(ctx(t), &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}, Spec: spec},
			metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("a token for user %q, groups %v: %v, want 422 (system: names are Kubernetes' and the server's own)", spec.User, spec.Groups, err)
		}
	}
	// What an agent reports, an operator may still correct.
	if r := do(t, s.Config, "PATCH", status, "application/merge-patch+json", strings.NewReader(`{"status":{"inventory":{"cpu":96,"memoryMiB":1048576,"diskGiB":100}}}`)); r.code != http.StatusOK {
		t.Errorf("an operator's correction of the inventory: %d %s", r.code, r.body)
	}
}
