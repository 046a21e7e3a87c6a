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

func readyNode(name string, applied int64) *nodusv1.Node {
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.NodeSpec{Pool: "fra1", LoginUser: "admin"},
		Status: nodusv1.NodeStatus{SSHHostKey: "ssh-ed25519 AAAA", AppliedEpoch: applied}}
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
		"activates at the start of the term": {
			o:     observed{now: t0, reservation: reservationAt(nodusv1.ReservationStatePending, 0, "", ""), node: readyNode("n1", 0)},
			state: nodusv1.ReservationStateActive, epoch: 1},
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
		"reassignment raises the epoch": {
			o: observed{now: t0, reservation: func() *nodusv1.Reservation {
				r := reservationAt(nodusv1.ReservationStateActive, 3, "n1", "ubuntu")
				r.Spec.Placement.Node = "n2"
				return r
			}(), node: readyNode("n1", 3)},
			state: nodusv1.ReservationStateActive, epoch: 4},
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
