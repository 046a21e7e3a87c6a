package agent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestTheAgentCapsAnAgreementWithoutCapsFromItsOwnInventory: a lend from
// before every lend had to cap memory and CPUs reaches the agent with caps
// of 0, no limit to a sandbox. The agent caps it at the host's share from
// the inventory it read itself, whatever the server stored of it, and
// leaves it uncapped (the runner then starts nothing) until it has read it.
func TestTheAgentCapsAnAgreementWithoutCapsFromItsOwnInventory(t *testing.T) {
	reservation := func(state nodusv1.ReservationState, l *nodusv1.ReservationLending) *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "7d3c9a52-0c44-4c4e-9f0e-2a1d1d3b5e01"}}
		r.Status.State, r.Status.Lending = state, l
		return r
	}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "r1", "7d3c9a52-0c44-4c4e-9f0e-2a1d1d3b5e01"
	uncapped := &nodusv1.ReservationLending{Lent: true, MaxGPUs: 4, MaxExecutions: 4}
	reservations := []interface{}{
		reservation(nodusv1.ReservationStateReleased, &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 1 << 20, MilliCPUs: 1 << 20}),
		reservation(nodusv1.ReservationStateActive, uncapped),
	}
	inv := &nodusv1.NodeInventory{CPU: 32, MemoryMiB: 256 << 10, GPUs: make([]nodusv1.NodeGPU, 8)}
	got := lentAgreement(reservations, node, inv, time.Now())
	if got == nil || got.MaxGPUs != 4 || got.MemoryMiB != 128<<10 || got.MilliCPUs != 16000 {
		t.Errorf("the lent agreement, capped from a host of 8 GPUs, 256 GiB and 32 CPUs: %+v, want 4 GPUs, 128 GiB, 16 CPUs", got)
	}
	if uncapped.MemoryMiB != 0 || uncapped.MilliCPUs != 0 {
		t.Errorf("the informer's copy changed: %+v", uncapped)
	}
	if got := lentAgreement(reservations, node, nil, time.Now()); got == nil || got.MemoryMiB != 0 || got.MilliCPUs != 0 {
		t.Errorf("the lent agreement before the inventory is read: %+v, want it uncapped", got)
	}
	if got := lentAgreement(reservations[:1], node, inv, time.Now()); got != nil {
		t.Errorf("a released reservation's agreement was taken as lent: %+v", got)
	}
	// A term over by this host's clock lends nothing more, before the
	// server says so.
	over := reservation(nodusv1.ReservationStateActive, uncapped)
	over.Spec.EndsAt = metav1.NewTime(time.Now().Add(-time.Second))
	if got := lentAgreement([]interface{}{over}, node, inv, time.Now()); got != nil {
		t.Errorf("the agreement of a reservation whose term ended was taken as lent: %+v", got)
	}
	// A machine enrolled under the name of a deleted one lists that one's
	// reservations; until one of them claims it, none lends it.
	for _, other := range []*nodusv1.Node{{}, {Status: nodusv1.NodeStatus{Reservation: "r1", ReservationUID: "0b7f3e0e-7a53-4d36-a4a4-54f1d0d1c2a9"}},
		{Status: nodusv1.NodeStatus{Reservation: "r2"}}} {
		if got := lentAgreement(reservations, other, inv, time.Now()); got != nil {
			t.Errorf("an agreement was taken as lent on a node whose claim is %q/%q: %+v", other.Status.Reservation, other.Status.ReservationUID, got)
		}
	}
}

// TestTheAgentHoldsAnAgreementToItsOwnMachine: an agreement that lends
// more memory or CPUs than this machine has (a reservation moved from a
// larger one, or a server that says so) was kept as lent, and a borrower's
// sandbox could be given more memory than the host has, for the kernel to
// take back from the owner's processes, sshd and nodusd. The agent holds
// it to the inventory it read itself.
func TestTheAgentHoldsAnAgreementToItsOwnMachine(t *testing.T) {
	r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "7d3c9a52-0c44-4c4e-9f0e-2a1d1d3b5e01"}}
	r.Status.State = nodusv1.ReservationStateActive
	r.Status.Lending = &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 1 << 39, MilliCPUs: 1 << 39}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "r1", "7d3c9a52-0c44-4c4e-9f0e-2a1d1d3b5e01"
	inv := &nodusv1.NodeInventory{CPU: 32, MemoryMiB: 64 << 10, GPUs: make([]nodusv1.NodeGPU, 8)}
	got := lentAgreement([]interface{}{r}, node, inv, time.Now())
	if got == nil || got.MemoryMiB != 64<<10 || got.MilliCPUs != 32000 || got.MaxGPUs != 8 {
		t.Errorf("an agreement of 512 TiB and 512 billion CPUs on a host of 64 GiB and 32 CPUs: %+v", got)
	}
	if r.Status.Lending.MemoryMiB != 1<<39 {
		t.Errorf("the informer's copy changed: %+v", r.Status.Lending)
	}
}
