package reservation

import (
	"strings"
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
		Status: nodusv1.NodeStatus{SSHHostKey: "ssh-ed25519 AAAA", ProvisionState: nodusv1.ProvisionStateAvailable}}
	meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived"})
	return n
}

func TestReconcileLifecycle(t *testing.T) {
	cases := map[string]struct {
		o         observed
		state     nodusv1.ReservationState
		epoch     int64
		unchanged bool
	}{
		"activates at the start of the term on its claimed node": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: readyNode("n1", 0)},
			state: nodusv1.ReservationStateActive, epoch: 1},
		"claims a free node before it activates": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: freeNode("n1")},
			state: nodusv1.ReservationStatePending, epoch: 0},
		"never activates on a node another reservation holds": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: heldBy(freeNode("n1"), "r2")},
			state: nodusv1.ReservationStatePending, epoch: 0},
		"never activates on a node being cleaned": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: cleaning(freeNode("n1"))},
			state: nodusv1.ReservationStatePending, epoch: 0},
		"waits for the start": {
			o:     observed{now: t0.Add(-2 * time.Hour), reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: readyNode("n1", 0)},
			state: nodusv1.ReservationStatePending, epoch: 0},
		"waits for a node": {
			o: observed{now: t0, reservation: func() *nodusv1.Reservation {
				r := reservationAt(nodusv1.ReservationStatePending, 0, "", "")
				r.Spec.Placement = nodusv1.ReservationPlacement{Allocation: "a1"}
				return r
			}(), allocation: &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "a1"}, Status: nodusv1.AllocationStatus{State: nodusv1.AllocationStateAllocating}}},
			state: nodusv1.ReservationStatePending, epoch: 0},
		"a steady active reservation does not change": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), node: readyNode("n1", 3)},
			state: nodusv1.ReservationStateActive, epoch: 3, unchanged: true},
		"a login-user change raises the epoch": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "olduser"), node: readyNode("n1", 3)},
			state: nodusv1.ReservationStateActive, epoch: 4},
		"reassignment raises the epoch once the new node is claimed": {
			o: observed{now: t0, reservation: func() *nodusv1.Reservation {
				r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
				r.Spec.Placement.Node = "n2"
				return r
			}(), node: readyNode("n1", 3), target: readyNode("n2", 0)},
			state: nodusv1.ReservationStateActive, epoch: 4},
		"reassignment to a node held by another waits": {
			o: observed{now: t0, reservation: func() *nodusv1.Reservation {
				r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
				r.Spec.Placement.Node = "n2"
				return r
			}(), node: readyNode("n1", 3), target: heldBy(freeNode("n2"), "r2")},
			state: nodusv1.ReservationStateActive, epoch: 3},
		"the term end retires access": {
			o:     observed{now: t0.Add(time.Hour), reservation: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), node: readyNode("n1", 3)},
			state: nodusv1.ReservationStateEnding, epoch: 4},
		"a release waits for evidence, never for time": {
			o:     observed{now: t0.Add(30 * 24 * time.Hour), reservation: reservationAt(nodusv1.ReservationStateReleasing, 4, "n1", "ubuntu"), node: readyNode("n1", 3)},
			state: nodusv1.ReservationStateReleasing, epoch: 4, unchanged: true},
		"a term that passed before activation ends without an epoch": {
			o:     observed{now: t0.Add(2 * time.Hour), reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: readyNode("n1", 0)},
			state: nodusv1.ReservationStateEnded, epoch: 0},
	}
	for name, tc := range cases {
		if tc.unchanged {
			// Let the first pass add its conditions, as it would in a server.
			first := reconcile(tc.o)
			if first.status != nil {
				tc.o.reservation.Status = *first.status
			}
		}
		d := reconcile(tc.o)
		st := tc.o.reservation.Status
		if d.status != nil {
			st = *d.status
		}
		if st.State != tc.state || st.Epoch != tc.epoch {
			t.Errorf("%s: state %s epoch %d, want %s %d", name, st.State, st.Epoch, tc.state, tc.epoch)
		}
		if tc.unchanged && d.status != nil {
			t.Errorf("%s: wrote a status that did not change: %+v", name, d.status)
		}
	}
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

// TestClaimsAndHandovers checks what reconcile writes to nodes: a claim
// before any access, the reason a reservation waits, and a cleaning request
// for every node a reservation lets go.
func TestClaimsAndHandovers(t *testing.T) {
	pending := func() *nodusv1.Reservation { return reservationAt(nodusv1.ReservationStatePending, 0, "", "") }
	moved := func() *nodusv1.Reservation {
		r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
		r.Spec.Placement.Node = "n2"
		return r
	}
	cases := map[string]struct {
		o         observed
		claim     string   // node claimed, or ""
		waits     string   // the Placed condition's reason, or ""
		handovers []string // nodes handed over
	}{
		"a free node is claimed":             {o: observed{reservation: pending(), node: freeNode("n1")}, claim: "n1"},
		"an unknown node":                    {o: observed{reservation: pending()}, waits: "NodeNotFound"},
		"a node held by another reservation": {o: observed{reservation: pending(), node: heldBy(freeNode("n1"), "r2")}, waits: "NodeReserved"},
		"a node in maintenance":              {o: observed{reservation: pending(), node: inMaintenance(freeNode("n1"))}, waits: "NodeInMaintenance"},
		"a node being cleaned":               {o: observed{reservation: pending(), node: cleaning(freeNode("n1"))}, waits: "NodeCleaning"},
		"maintenance never evicts the holder": {
			o: observed{reservation: reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu"), node: inMaintenance(readyNode("n1", 3)),
				held: []*nodusv1.Node{readyNode("n1", 3)}}},
		"a release keeps its node until drained": {
			o: observed{reservation: reservationAt(nodusv1.ReservationStateReleasing, 4, "n1", "ubuntu"), node: readyNode("n1", 4),
				held: []*nodusv1.Node{readyNode("n1", 4)}}},
		"a drained release hands its node over": {
			o: observed{reservation: reservationAt(nodusv1.ReservationStateReleased, 4, "n1", "ubuntu"), node: readyNode("n1", 4),
				held: []*nodusv1.Node{readyNode("n1", 4)}}, handovers: []string{"n1"}},
		"an ended term hands its node over": {
			o: observed{reservation: reservationAt(nodusv1.ReservationStateEnded, 4, "n1", "ubuntu"), node: readyNode("n1", 4),
				held: []*nodusv1.Node{readyNode("n1", 4)}}, handovers: []string{"n1"}},
		"a reassignment claims the new node first": {
			o: observed{reservation: moved(), node: readyNode("n1", 3), target: freeNode("n2"), held: []*nodusv1.Node{readyNode("n1", 3)}}, claim: "n2"},
		"a reassignment hands the old node over": {
			o: observed{reservation: moved(), node: readyNode("n1", 3), target: readyNode("n2", 0),
				held: []*nodusv1.Node{readyNode("n1", 3), readyNode("n2", 0)}}, handovers: []string{"n1"}},
		"a pending reservation keeps the node it claimed": {
			o: observed{reservation: func() *nodusv1.Reservation {
				r := pending()
				r.Spec.LoginUser = ""
				return r
			}(), node: readyNode("n1", 0), held: []*nodusv1.Node{readyNode("n1", 0)}}},
	}
	for name, tc := range cases {
		tc.o.now = t0
		d := reconcile(tc.o)
		got := ""
		if d.claim != nil {
			got = d.claim.Name
			if d.claim.Status.Reservation != "r1" || d.claim.Status.ProvisionState != nodusv1.ProvisionStateActive {
				t.Errorf("%s: the claim writes %+v", name, d.claim.Status)
			}
			if d.status != nil && d.status.State == nodusv1.ReservationStateActive && tc.o.reservation.Status.State == nodusv1.ReservationStatePending {
				t.Errorf("%s: activated in the pass that only claims", name)
			}
		}
		if got != tc.claim {
			t.Errorf("%s: claimed %q, want %q", name, got, tc.claim)
		}
		st := tc.o.reservation.Status
		if d.status != nil {
			st = *d.status
		}
		if tc.waits != "" {
			c := meta.FindStatusCondition(st.Conditions, "Placed")
			if c == nil || c.Reason != tc.waits || c.Status != metav1.ConditionFalse || st.State != nodusv1.ReservationStatePending {
				t.Errorf("%s: state %s, Placed %+v; want pending with %s", name, st.State, c, tc.waits)
			}
		}
		var handed []string
		for _, n := range d.handovers {
			handed = append(handed, n.Name)
			c := n.Status.Cleaning
			if n.Status.Reservation != "" || n.Status.ProvisionState != nodusv1.ProvisionStateCleaning || c == nil ||
				c.Phase != nodusv1.CleaningPending || c.Reservation != "r1" || c.Epoch != st.Epoch || len(c.Users) == 0 {
				t.Errorf("%s: handover of %s writes %+v", name, n.Name, n.Status)
			}
		}
		if strings.Join(handed, ",") != strings.Join(tc.handovers, ",") {
			t.Errorf("%s: handed over %v, want %v", name, handed, tc.handovers)
		}
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
