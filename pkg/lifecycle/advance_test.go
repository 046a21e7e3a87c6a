package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

func reservationAt(state nodusv1.ReservationState, epoch int64, node, loginUser string) *nodusv1.Reservation {
	return &nodusv1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: "r1"},
		Spec: nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "n1"},
			StartsAt: metav1.NewTime(t0.Add(-time.Hour)), EndsAt: metav1.NewTime(t0.Add(time.Hour)), LoginUser: "ubuntu"},
		Status: nodusv1.ReservationStatus{State: state, Epoch: epoch, Node: node, LoginUser: loginUser},
	}
}

func freeNode(name string) *nodusv1.Node {
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.NodeSpec{LoginUser: "admin"},
		Status: nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateAvailable}}
	meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived"})
	return n
}

// held is a node claimed by reservation.
func held(name, reservation string) *nodusv1.Node {
	n := freeNode(name)
	n.Status.Reservation, n.Status.ProvisionState = reservation, nodusv1.ProvisionStateActive
	return n
}

// withUID gives r a UID, and a node held by it the same UID in its claim.
func withUID(r *nodusv1.Reservation, uid string) *nodusv1.Reservation {
	r.UID = types.UID(uid)
	return r
}

// heldAs is a node whose claim names reservation with uid.
func heldAs(name, reservation, uid string) *nodusv1.Node {
	n := held(name, reservation)
	n.Status.ReservationUID = types.UID(uid)
	return n
}

func at(name string, n *nodusv1.Node) Placement {
	return Placement{Node: name, Target: n, LoginUser: "ubuntu"}
}

// TestAdvance is every transition of a reservation: the state and epoch it
// moves to, the claim it writes first, why it waits, and the nodes it hands
// over to cleaning.
func TestAdvance(t *testing.T) {
	moved := func() *nodusv1.Reservation {
		r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
		r.Spec.Placement.Node = "n2"
		return r
	}
	cleaning := Handover(held("n1", "r0"), "r0", 4, nil, t0)
	maintenance := freeNode("n1")
	maintenance.Spec.Maintenance = true
	inMaintenanceHeld := held("n1", "r1")
	inMaintenanceHeld.Spec.Maintenance = true
	cases := map[string]struct {
		r         *nodusv1.Reservation
		p         Placement
		held      []*nodusv1.Node
		now       time.Time
		state     nodusv1.ReservationState
		epoch     int64
		claim     string
		waits     string
		handovers string
		access    int64 // how far the project's access revision moved
	}{
		"pending claims a free node first": {r: reservationAt("", 0, "", ""), p: at("n1", freeNode("n1")),
			state: nodusv1.ReservationStatePending, claim: "n1"},
		"pending activates on its claimed node": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateActive, epoch: 1},
		"pending waits for the start": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", freeNode("n1")), now: t0.Add(-2 * time.Hour),
			state: nodusv1.ReservationStatePending},
		"pending waits for an allocation": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: Placement{},
			state: nodusv1.ReservationStatePending},
		"pending on an unknown node": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: Placement{Node: "n1"},
			state: nodusv1.ReservationStatePending, waits: "NodeNotFound"},
		"pending on another's node": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", held("n1", "r2")),
			state: nodusv1.ReservationStatePending, waits: "NodeReserved"},
		"pending on a node being cleaned": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", cleaning),
			state: nodusv1.ReservationStatePending, waits: "NodeCleaning"},
		"pending on a node in maintenance": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", maintenance),
			state: nodusv1.ReservationStatePending, waits: "NodeInMaintenance"},
		"a term that passed before activation ends without an epoch": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""),
			p: at("n1", freeNode("n1")), now: t0.Add(2 * time.Hour), state: nodusv1.ReservationStateEnded},
		"a claim a term-passed reservation made is handed over": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""),
			p: at("n1", held("n1", "r1")), held: []*nodusv1.Node{held("n1", "r1")}, now: t0.Add(2 * time.Hour),
			state: nodusv1.ReservationStateEnded, handovers: "n1"},
		"a steady active reservation": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateActive, epoch: 3},
		"maintenance never evicts the holder": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), p: at("n1", inMaintenanceHeld),
			held: []*nodusv1.Node{inMaintenanceHeld}, state: nodusv1.ReservationStateActive, epoch: 3},
		"an active reservation without a claim takes it": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), p: at("n1", freeNode("n1")),
			state: nodusv1.ReservationStateActive, epoch: 3, claim: "n1"},
		"a login-user change raises the epoch": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "olduser"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateActive, epoch: 4},
		"a reassignment claims the new node first": {r: moved(), p: at("n2", freeNode("n2")), held: []*nodusv1.Node{held("n1", "r1")},
			state: nodusv1.ReservationStateActive, epoch: 3, claim: "n2"},
		"a reassignment moves once claimed, and hands the old node over": {r: moved(), p: at("n2", held("n2", "r1")),
			held: []*nodusv1.Node{held("n1", "r1"), held("n2", "r1")}, state: nodusv1.ReservationStateActive, epoch: 4, handovers: "n1"},
		"a reassignment to another's node waits": {r: moved(), p: at("n2", held("n2", "r2")), held: []*nodusv1.Node{held("n1", "r1")},
			state: nodusv1.ReservationStateActive, epoch: 3, waits: "NodeReserved"},
		"the term end retires access": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, now: t0.Add(time.Hour), state: nodusv1.ReservationStateEnding, epoch: 4},
		"a release waits for evidence, never for time": {r: reservationAt(nodusv1.ReservationStateReleasing, 4, "n1", "ubuntu"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, now: t0.Add(30 * 24 * time.Hour), state: nodusv1.ReservationStateReleasing, epoch: 4},
		"a drained release hands its node over": {r: reservationAt(nodusv1.ReservationStateReleased, 4, "n1", "ubuntu"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateReleased, epoch: 4, handovers: "n1"},
		"a claim carries the reservation's UID": {r: withUID(reservationAt("", 0, "", ""), "u2"), p: at("n1", freeNode("n1")),
			state: nodusv1.ReservationStatePending, claim: "n1"},
		"pending activates on its claim of its UID": {r: withUID(reservationAt(nodusv1.ReservationStatePending, 0, "", ""), "u2"),
			p: at("n1", heldAs("n1", "r1", "u2")), held: []*nodusv1.Node{heldAs("n1", "r1", "u2")}, state: nodusv1.ReservationStateActive, epoch: 1},
		"pending waits on an earlier reservation's claim under its name": {r: withUID(reservationAt(nodusv1.ReservationStatePending, 0, "", ""), "u2"),
			p: at("n1", heldAs("n1", "r1", "u1")), state: nodusv1.ReservationStatePending, waits: "NodeReserved"},
		"pending waits on a claim of its name without a UID": {r: withUID(reservationAt(nodusv1.ReservationStatePending, 0, "", ""), "u2"),
			p: at("n1", held("n1", "r1")), state: nodusv1.ReservationStatePending, waits: "NodeReserved"},
		"an active reservation writes its UID into its claim without one": {r: withUID(reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), "u2"),
			p: at("n1", held("n1", "r1")), held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateActive, epoch: 3, claim: "n1"},
		"a member losing SSH raises an active reservation's epoch": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"),
			p: at("n1", held("n1", "r1")), held: []*nodusv1.Node{held("n1", "r1")}, access: 1, state: nodusv1.ReservationStateActive, epoch: 4},
		"a member losing SSH with a login-user change raises the epoch once": {r: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "olduser"),
			p: at("n1", held("n1", "r1")), held: []*nodusv1.Node{held("n1", "r1")}, access: 2, state: nodusv1.ReservationStateActive, epoch: 4},
		"a pending reservation records a member losing SSH": {r: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), p: at("n1", held("n1", "r2")),
			access: 1, state: nodusv1.ReservationStatePending, waits: "NodeReserved"},
		"a releasing reservation records a member losing SSH": {r: reservationAt(nodusv1.ReservationStateReleasing, 4, "n1", "ubuntu"),
			p: at("n1", held("n1", "r1")), held: []*nodusv1.Node{held("n1", "r1")}, access: 1, state: nodusv1.ReservationStateReleasing, epoch: 4},
		"an active reservation whose node another holds ends, handing nothing over": {r: withUID(reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), "u1"),
			p: at("n1", heldAs("n1", "r2", "u9")), state: nodusv1.ReservationStateEnding, epoch: 4, waits: "NodeLost"},
		"an active reservation whose node an earlier namesake's claim holds ends": {r: withUID(reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), "u2"),
			p: at("n1", heldAs("n1", "r1", "u1")), state: nodusv1.ReservationStateEnding, epoch: 4, waits: "NodeLost"},
		"a lost node is not a login-user change": {r: withUID(reservationAt(nodusv1.ReservationStateActive, 3, "n1", "olduser"), "u1"),
			p: at("n1", heldAs("n1", "r2", "u9")), state: nodusv1.ReservationStateEnding, epoch: 4, waits: "NodeLost"},
		"an ended term hands its node over": {r: reservationAt(nodusv1.ReservationStateEnded, 4, "n1", "ubuntu"), p: at("n1", held("n1", "r1")),
			held: []*nodusv1.Node{held("n1", "r1")}, state: nodusv1.ReservationStateEnded, epoch: 4, handovers: "n1"},
	}
	for name, tc := range cases {
		now := tc.now
		if now.IsZero() {
			now = t0
		}
		step := Advance(tc.r, tc.p, tc.held, tc.r.Status.ProjectAccessRevision+tc.access, now)
		if step.Status.State != tc.state || step.Status.Epoch != tc.epoch {
			t.Errorf("%s: state %s epoch %d, want %s %d", name, step.Status.State, step.Status.Epoch, tc.state, tc.epoch)
		}
		if want := tc.r.Status.ProjectAccessRevision + tc.access; step.Claim == nil && step.Status.ProjectAccessRevision != want {
			t.Errorf("%s: recorded project access revision %d, want %d", name, step.Status.ProjectAccessRevision, want)
		}
		claim := ""
		if step.Claim != nil {
			claim = step.Claim.Name
			if step.Claim.Status.Reservation != "r1" || step.Claim.Status.ReservationUID != tc.r.UID || step.Claim.Status.ProvisionState != nodusv1.ProvisionStateActive {
				t.Errorf("%s: the claim writes %+v", name, step.Claim.Status)
			}
			if step.Status.Epoch != tc.r.Status.Epoch {
				t.Errorf("%s: the epoch moved in the step that only claims", name)
			}
		}
		if claim != tc.claim {
			t.Errorf("%s: claimed %q, want %q", name, claim, tc.claim)
		}
		waits := ""
		if step.Blocker != nil {
			waits = string(step.Blocker.Reason)
		}
		if waits != tc.waits {
			t.Errorf("%s: waits for %q, want %q", name, waits, tc.waits)
		}
		var handed []string
		for _, n := range step.Handovers {
			handed = append(handed, n.Name)
			c := n.Status.Cleaning
			if n.Status.Reservation != "" || n.Status.ReservationUID != "" || n.Status.ProvisionState != nodusv1.ProvisionStateCleaning || c == nil ||
				c.Phase != nodusv1.CleaningPending || c.Reservation != "r1" || c.Epoch != step.Status.Epoch || len(c.Users) == 0 {
				t.Errorf("%s: handover of %s writes %+v", name, n.Name, n.Status)
			}
		}
		if lost := step.LostNode != ""; lost != (tc.waits == "NodeLost") || (lost && step.LostNode != tc.r.Status.Node) {
			t.Errorf("%s: lost node %q", name, step.LostNode)
		}
		if strings.Join(handed, ",") != tc.handovers {
			t.Errorf("%s: handed over %v, want %q", name, handed, tc.handovers)
		}
		if step.ReleaseAllocation != Final(step.Status.State) && tc.r.Status.State != nodusv1.ReservationStatePending {
			t.Errorf("%s: release the allocation %v in state %s", name, step.ReleaseAllocation, step.Status.State)
		}
	}
}

func TestLendAndWithdraw(t *testing.T) {
	r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
	if Withdraw(r, 3, t0) {
		t.Error("withdrawing what was never lent changed something")
	}
	Lend(r, &nodusv1.ReservationLending{MaxGPUs: 4, MaxExecutions: 2}, 3, t0)
	if l := r.Status.Lending; l == nil || !l.Lent || l.MaxGPUs != 4 || l.Epoch != 3 || r.Status.Epoch != 3 {
		t.Errorf("lend: %+v (epoch %d)", l, r.Status.Epoch)
	}
	if !Withdraw(r, 3, t0.Add(time.Minute)) || r.Status.Lending.Lent || r.Status.Epoch != 3 {
		t.Errorf("withdraw: %+v (epoch %d)", r.Status.Lending, r.Status.Epoch)
	}
	if Withdraw(r, 3, t0) {
		t.Error("withdrawing twice changed something")
	}
}

func TestRememberRequestKeepsTheNewest(t *testing.T) {
	var keys []string
	for i := range 20 {
		keys = RememberRequest(keys, fmt.Sprint("k", i), 16)
	}
	if len(keys) != 16 || keys[0] != "k4" || keys[15] != "k19" {
		t.Fatalf("kept %v, want k4…k19", keys)
	}
	shared := keys[:15]
	_ = RememberRequest(shared, "other", 16)
	if keys[15] != "k19" {
		t.Errorf("RememberRequest wrote into the caller's array: %v", keys)
	}
}
