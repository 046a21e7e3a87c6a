package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAMachineEnrolledAgainIsCleanedBeforeAnyoneClaimsIt: an operator
// deletes a held node (nodus.dev/delete-uncleaned) and enrolls the same
// machine again, its state directory kept, under another name. The new
// node was available at its first heartbeat: the next reservation claimed
// it while the earlier tenant's account still held what it left, and
// nodusd, whose own record says that access owes a cleaning, refused the
// new tenant (AccessRefused) until an operator cleaned the node by hand.
// nodusd enroll says that the state owes a cleaning; the new node is
// created being cleaned, and the reservation claims it once that cleaning
// succeeded.
func TestAMachineEnrolledAgainIsCleanedBeforeAnyoneClaimsIt(t *testing.T) {
	login, uid, gid, home := homeAccount(t, "nodus-again", "the login account nodusd grants and cleans")
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	paths := scratchCleaningPaths(t)
	// nodusd on the machine, started and stopped as the operator would.
	start := func() (stop func()) {
		a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, CleanCommand: "true", CleaningPaths: paths})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = a.Run(runCtx); close(done) }()
		stop = func() { cancel(); <-done }
		t.Cleanup(stop)
		return stop
	}
	connected := func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return c != nil && c.Status == metav1.ConditionTrue
	}
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: login}
	now := time.Now()

	enrollAgent(t, s, "before", spec, dir)
	stop := start()
	f.reserve(t, "before", nodusv1.ReservationPlacement{Node: "before"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "before", connected)
	leftover := filepath.Join(home, "leftover")
	if err := os.WriteFile(leftover, []byte("the earlier tenant's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(leftover, uid, gid); err != nil {
		t.Fatal(err)
	}
	stop()

	deleteGoneNode(t, s, "before")
	enrollAgent(t, s, "after", spec, dir)
	f.reserve(t, "after", nodusv1.ReservationPlacement{Node: "after"}, now.Add(-time.Hour), now.Add(time.Hour))
	start()
	var last *nodusv1.ReservedHost
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		h, err := s.Client.NodusV1().ReservedHosts("acme").Get(c, "after", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = h
		cond := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return cond != nil && (cond.Status == metav1.ConditionTrue || cond.Reason == "AccessRefused"), nil
	}); err != nil {
		t.Fatalf("the next tenant's host was never connected nor refused: %+v", last)
	}
	if !connected(last) {
		t.Fatalf("the next reservation claimed a machine that owed an earlier tenant's cleaning, and nodusd refused it: %+v",
			meta.FindStatusCondition(last.Status.Conditions, nodusv1.ReservedHostConditionConnected))
	}
	node, err := s.Client.NodusV1().Nodes().Get(ctx(t), "after", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := node.Status.Cleaning; c == nil || c.Request != 1 || c.Phase != nodusv1.CleaningSucceeded {
		t.Errorf("the machine enrolled again was claimed without its cleaning: %+v", c)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the earlier tenant's file is left to the next one: %v", err)
	}
}

// TestAnEnrollmentOfAStateThatOwesACleaningHoldsItsNodeBack: what the
// server does with an enrollment whose state directory records a tenant's
// access no cleaning discharged (no root needed: the state database is
// written as nodusd writes it, no account is touched). A node it creates
// is created being cleaned, and a reservation waiting for it does not
// claim it; a node nothing holds that it enrolls again goes to cleaning;
// a held node keeps its holder.
func TestAnEnrollmentOfAStateThatOwesACleaningHoldsItsNodeBack(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	owing := func() string {
		t.Helper()
		dir := t.TempDir()
		db, err := state.Open(filepath.Join(dir, "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if ok, err := db.Apply(state.Access{Reservation: "earlier", UID: "1a2b3c4d-0000-4000-8000-000000000001", Epoch: 1, State: "active", LoginUser: "bob"}); !ok || err != nil {
			t.Fatalf("recording the earlier tenant's access: %v %v", ok, err)
		}
		return dir
	}
	beingCleaned := func(n *nodusv1.Node, request int64) bool {
		c := n.Status.Cleaning
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && c != nil && c.Request == request && c.Phase == nodusv1.CleaningPending
	}
	now := time.Now()
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}

	f.reserve(t, "waiting", nodusv1.ReservationPlacement{Node: "created"}, now.Add(-time.Hour), now.Add(time.Hour))
	// From its first version on: a node in enroll may be claimed before
	// its agent's first report, and the enrollment's later steps too.
	w, err := s.Client.NodusV1().Nodes().Watch(ctx(t), metav1.ListOptions{FieldSelector: "metadata.name=created"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	enrollAgent(t, s, "created", spec, owing())
	select {
	case ev := <-w.ResultChan():
		if n, ok := ev.Object.(*nodusv1.Node); !ok || ev.Type != watch.Added || !beingCleaned(n, 1) {
			t.Errorf("the node's first version: %s %+v, want it created being cleaned", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event of the node's creation")
	}
	created, err := s.Client.NodusV1().Nodes().Get(ctx(t), "created", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !beingCleaned(created, 1) || created.Status.AgentGeneration != 1 {
		t.Errorf("a node enrolled for a state that owes a cleaning: %s, generation %d, cleaning %+v; want request 1 pending",
			created.Status.ProvisionState, created.Status.AgentGeneration, created.Status.Cleaning)
	}
	waiting := waitReservation(t, s, "waiting", func(r *nodusv1.Reservation) bool {
		return meta.FindStatusCondition(r.Status.Conditions, "Placed") != nil
	})
	if p := meta.FindStatusCondition(waiting.Status.Conditions, "Placed"); p.Reason != "NodeCleaning" {
		t.Errorf("the reservation waiting for the node: Placed %s (%s), want NodeCleaning", p.Reason, p.Message)
	}

	// Enrolled again, a node nothing holds goes to cleaning.
	f.node(t, "free")
	free := spec
	free.NodeName = "free"
	enrollAgent(t, s, "free", free, owing())
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "free", metav1.GetOptions{}); err != nil || !beingCleaned(n, 1) {
		t.Errorf("a free node enrolled again for a state that owes a cleaning: %v %+v", err, n.Status)
	}
	// A state that owes nothing leaves it as it is.
	f.node(t, "plain")
	plain := spec
	plain.NodeName = "plain"
	enrollAgent(t, s, "plain", plain, t.TempDir())
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "plain", metav1.GetOptions{}); err != nil || n.Status.ProvisionState == nodusv1.ProvisionStateCleaning || n.Status.Cleaning != nil {
		t.Errorf("a node enrolled again for a state that owes nothing: %v %+v", err, n.Status)
	}

	// A database a running nodusd holds cannot be read: taken as owing.
	busy := t.TempDir()
	held, err := state.Open(filepath.Join(busy, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	enrollAgent(t, s, "busy", spec, busy)
	held.Close()
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "busy", metav1.GetOptions{}); err != nil || !beingCleaned(n, 1) {
		t.Errorf("a node enrolled while nodusd held the state database: %v %+v", err, n.Status)
	}

	// A held node keeps its holder, and the answer says that the node is
	// not held back (nodusd enroll warns), where it says so of one that is.
	f.host(t, "held", now.Add(-time.Hour), now.Add(time.Hour))
	holder := spec
	holder.NodeName = "held"
	enroll := func(spec nodusv1.EnrollmentTokenSpec, node string) nodusv1.NodeEnrollment {
		t.Helper()
		tok := issueToken(t, s, "", spec)
		r := do(t, bearer(s, tok.Status.Token), "POST", "/apis/nodus.dev/v1/nodes/"+node+"/enroll", "application/json",
			strings.NewReader(fmt.Sprintf(`{"certificateRequest":%q,"cleaningOwed":true}`, certificateRequest(t))))
		var answer nodusv1.NodeEnrollment
		if r.code != http.StatusCreated && r.code != http.StatusOK || json.Unmarshal(r.body, &answer) != nil {
			t.Fatalf("enrolling %s: %d %s", node, r.code, r.body)
		}
		return answer
	}
	if answer := enroll(holder, "held"); answer.CleaningOwed {
		t.Error("the answer for a held node says that it is held back for the cleaning owed")
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "held", metav1.GetOptions{}); err != nil || n.Status.Reservation != "held" ||
		n.Status.ProvisionState != nodusv1.ProvisionStateActive || n.Status.Cleaning != nil {
		t.Errorf("a held node enrolled again for a state that owes a cleaning: %v %+v", err, n.Status)
	}
	if answer := enroll(spec, "answered"); !answer.CleaningOwed || answer.AgentGeneration != 1 {
		t.Errorf("the answer for a node created being cleaned: %+v, want cleaningOwed", answer)
	}

	// Its deletion is refused as any node's that owes a cleaning is, in
	// words that name no reservation before it.
	err = s.Client.NodusV1().Nodes().Delete(ctx(t), "created", metav1.DeleteOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "has cleaning request 1 pending") || strings.Contains(err.Error(), "after reservation") {
		t.Errorf("deleting a node created being cleaned: %v, want 409 saying that cleaning request 1 is pending", err)
	}
}
