package reservation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func reservationAt(state nodusv1.ReservationState, epoch int64, node, loginUser string) *nodusv1.Reservation {
	return &nodusv1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: "r1"},
		Spec: nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "n1"},
			StartsAt: metav1.NewTime(t0.Add(-time.Hour)), EndsAt: metav1.NewTime(t0.Add(time.Hour)), LoginUser: "ubuntu"},
		Status: nodusv1.ReservationStatus{State: state, Epoch: epoch, Node: node, LoginUser: loginUser},
	}
}

// readyNode is a node whose agent reports at epoch applied, claimed by r1.
func readyNode(name string, applied int64) *nodusv1.Node {
	n := freeNode(name)
	n.Status.AppliedEpoch, n.Status.Reservation, n.Status.ProvisionState = applied, "r1", nodusv1.ProvisionStateActive
	return n
}

func freeNode(name string) *nodusv1.Node {
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.NodeSpec{Pool: "fra1", LoginUser: "admin"},
		Status: nodusv1.NodeStatus{SSHHostKey: "ssh-ed25519 AAAA", SSHAddress: "192.0.2.10:22", ProvisionState: nodusv1.ProvisionStateAvailable}}
	meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived"})
	return n
}

func heldBy(n *nodusv1.Node, reservation string) *nodusv1.Node {
	n.Status.Reservation, n.Status.ProvisionState = reservation, nodusv1.ProvisionStateActive
	return n
}

func cleaning(n *nodusv1.Node) *nodusv1.Node {
	n.Status.ProvisionState = nodusv1.ProvisionStateCleaning
	n.Status.Cleaning = &nodusv1.NodeCleaning{Request: 1, Phase: nodusv1.CleaningPending}
	return n
}

func inMaintenance(n *nodusv1.Node) *nodusv1.Node {
	n.Spec.Maintenance, n.Spec.MaintenanceReason = true, "fan"
	return n
}

// TestPlacedCondition: the lifecycle's transitions are pkg/lifecycle's
// (TestAdvance); the controller says on the Placed condition why a
// reservation waits, and passes on the claim and the handovers.
func TestPlacedCondition(t *testing.T) {
	pending := func() *nodusv1.Reservation { return reservationAt(nodusv1.ReservationStatePending, 0, "", "") }
	cases := map[string]struct {
		o      observed
		reason string
		status metav1.ConditionStatus
	}{
		"an unknown node":                    {observed{reservation: pending()}, "NodeNotFound", metav1.ConditionFalse},
		"a node held by another reservation": {observed{reservation: pending(), node: heldBy(freeNode("n1"), "r2")}, "NodeReserved", metav1.ConditionFalse},
		"a node in maintenance":              {observed{reservation: pending(), node: inMaintenance(freeNode("n1"))}, "NodeInMaintenance", metav1.ConditionFalse},
		"a node being cleaned":               {observed{reservation: pending(), node: cleaning(freeNode("n1"))}, "NodeCleaning", metav1.ConditionFalse},
		"placed":                             {observed{reservation: pending(), node: readyNode("n1", 0)}, "NodeAssigned", metav1.ConditionTrue},
	}
	for name, tc := range cases {
		tc.o.now = t0
		d := reconcile(tc.o)
		st := tc.o.reservation.Status
		if d.status != nil {
			st = *d.status
		}
		c := meta.FindStatusCondition(st.Conditions, "Placed")
		if c == nil || c.Reason != tc.reason || c.Status != tc.status {
			t.Errorf("%s: Placed %+v, want %s %s", name, c, tc.status, tc.reason)
		}
	}
	byClass := pending()
	byClass.Spec.Placement = nodusv1.ReservationPlacement{ResourceClass: "gpu"}
	for state, want := range map[nodusv1.AllocationState]string{
		nodusv1.AllocationStateAllocating: "waiting for allocation reservation-r1 to become active: every matching node is in maintenance",
		nodusv1.AllocationStateError:      "allocation reservation-r1 failed: every matching node is in maintenance",
	} {
		a := &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "reservation-r1"},
			Status: nodusv1.AllocationStatus{State: state, LastError: "every matching node is in maintenance"}}
		d := reconcile(observed{now: t0, reservation: byClass, allocation: a})
		if c := meta.FindStatusCondition(d.status.Conditions, "Placed"); c == nil || c.Message != want {
			t.Errorf("a reservation whose allocation is %s: Placed %+v, want the message %q", state, c, want)
		}
	}
	d := reconcile(observed{now: t0, reservation: pending(), node: freeNode("n1")})
	if d.claim == nil || d.claim.Name != "n1" || d.status == nil || d.status.State != nodusv1.ReservationStatePending {
		t.Errorf("a free node is claimed before anything else: %+v", d)
	}
	released := reservationAt(nodusv1.ReservationStateReleased, 4, "n1", "ubuntu")
	d = reconcile(observed{now: t0, reservation: released, node: readyNode("n1", 4), held: []*nodusv1.Node{readyNode("n1", 4)}})
	if len(d.handovers) != 1 || !d.releaseAlloc {
		t.Errorf("a drained release hands its node over and frees its allocation: %+v", d)
	}
}

func TestProjection(t *testing.T) {
	r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
	d := reconcile(observed{now: t0, reservation: r, node: readyNode("n1", 3)})
	h := d.host
	if h == nil || h.Namespace != "acme" || h.Name != "r1" || h.Labels[LabelReservation] != "r1" {
		t.Fatalf("projection: %+v", h)
	}
	want := nodusv1.ReservedHostConnect{Command: "nodus ssh acme/r1", Host: "r1.acme.nodus", HostKey: "ssh-ed25519 AAAA", LoginUser: "ubuntu"}
	if h.Status.Connect == nil || *h.Status.Connect != want {
		t.Errorf("connect: %+v", h.Status.Connect)
	}
	if c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Connected: %+v", c)
	}
	stale := reconcile(observed{now: t0, reservation: r, node: readyNode("n1", 2)}).host
	if c := meta.FindStatusCondition(stale.Status.Conditions, nodusv1.ReservedHostConditionConnected); c == nil || c.Reason != "EpochNotApplied" {
		t.Errorf("an agent at an older epoch is not connected: %+v", c)
	}
	moved := reconcile(observed{now: t0, reservation: r, node: readyNode("n9", 3)}).host
	if moved.Status.Connect != nil || moved.Status.Pool != "" {
		t.Errorf("a node the reservation left must not show: %+v", moved.Status)
	}
}

// TestEarlierAllocation: an allocation labelled with a reservation's name
// is an earlier one's when its UID label names another UID or, without the
// label, when it predates the reservation.
func TestEarlierAllocation(t *testing.T) {
	r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "u2", CreationTimestamp: metav1.NewTime(t0)}}
	allocation := func(uid string, made time.Time) *nodusv1.Allocation {
		a := &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "reservation-r1", Labels: map[string]string{LabelReservation: "r1"},
			CreationTimestamp: metav1.NewTime(made)}}
		if uid != "" {
			a.Labels[LabelReservationUID] = uid
		}
		return a
	}
	for name, tc := range map[string]struct {
		a    *nodusv1.Allocation
		want bool
	}{
		"its own":                          {allocation("u2", t0), false},
		"another UID's":                    {allocation("u1", t0.Add(time.Hour)), true},
		"without the label, made before":   {allocation("", t0.Add(-time.Second)), true},
		"without the label, made since":    {allocation("", t0.Add(time.Second)), false},
		"without the label, the same time": {allocation("", t0), false},
	} {
		if got := earlierAllocation(tc.a, r); got != tc.want {
			t.Errorf("%s: earlier %v, want %v", name, got, tc.want)
		}
	}
}
