package lifecycle

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func nodeHeldBy(reservation string) *nodusv1.Node {
	return &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: nodusv1.NodeSpec{LoginUser: "ubuntu"},
		Status: nodusv1.NodeStatus{Reservation: reservation, ProvisionState: nodusv1.ProvisionStateActive}}
}

func TestHandoverAsksForANewCleaning(t *testing.T) {
	n := Handover(nodeHeldBy("r1"), "r1", 5, []string{"alice", "", "ubuntu"}, t0)
	c := n.Status.Cleaning
	if n.Status.Reservation != "" || n.Status.ReservationUID != "" || n.Status.ProvisionState != nodusv1.ProvisionStateCleaning || c == nil {
		t.Fatalf("handover: %+v", n.Status)
	}
	if c.Request != 1 || c.Reservation != "r1" || c.Epoch != 5 || c.Phase != nodusv1.CleaningPending ||
		len(c.Users) != 2 || c.Users[0] != "alice" || c.Users[1] != "ubuntu" {
		t.Errorf("cleaning request: %+v", c)
	}
	// The claim's UID goes with the request: the agent records it with the
	// retirement of a reservation it may never have applied.
	held := nodeHeldBy("r1")
	held.Status.ReservationUID = "uid-r1"
	if uid := Handover(held, "r1", 5, nil, t0).Status.Cleaning.ReservationUID; uid != "uid-r1" {
		t.Errorf("the cleaning request names the reservation's UID %q, want the claim's", uid)
	}
	if uid := Handover(held, "r0", 0, nil, t0).Status.Cleaning.ReservationUID; uid != "" {
		t.Errorf("the cleaning after another name's reservation names the claim's UID %q", uid)
	}
	again := Handover(n, "r2", 1, nil, t0)
	if again.Status.Cleaning.Request != 2 {
		t.Errorf("a second cleaning must have a higher request: %d", again.Status.Cleaning.Request)
	}
}

// TestClaimKeepsNothingOfTheTenantBefore: the next tenant reads its node
// (root on the host has the agent's credential); the last cleaning's
// record keeps that it was done, not what it names of the tenant before.
func TestClaimKeepsNothingOfTheTenantBefore(t *testing.T) {
	exit := int32(0)
	held := nodeHeldBy("r1")
	held.Status.ReservationUID = "uid-r1"
	cleaned := RecordCleaning(Handover(held, "r1", 5, []string{"alice"}, t0),
		nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 5, Succeeded: true, Steps: []string{"ended every process of alice"},
			CommandExitCode: &exit, CommandOutput: "removed /srv/alice"}, 3, t0.Add(time.Minute)).Node
	cleaned.Status.AccessRefusal = &nodusv1.AccessRefusal{Reservation: "r1", ReservationUID: "uid-r1", Epoch: 5, Message: "alice is unknown"}
	next := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r2", UID: "uid-r2"}}

	claimed := Claim(cleaned, next)
	c := claimed.Status.Cleaning
	if claimed.Status.Reservation != "r2" || claimed.Status.ReservationUID != "uid-r2" || claimed.Status.ProvisionState != nodusv1.ProvisionStateActive {
		t.Fatalf("claim: %+v", claimed.Status)
	}
	if c.Request != 1 || c.Phase != nodusv1.CleaningSucceeded || !c.RequestedAt.Equal(&metav1.Time{Time: t0}) || c.CompletedAt == nil ||
		c.AgentGeneration != 3 || c.CommandExitCode == nil || *c.CommandExitCode != 0 {
		t.Errorf("the claim lost that the node was cleaned: %+v", c)
	}
	if c.Reservation != "" || c.ReservationUID != "" || c.Epoch != 0 || c.Users != nil || c.Steps != nil || c.Message != "" || c.CommandOutput != "" {
		t.Errorf("the claimed node's cleaning record names the tenant before: %+v", c)
	}
	if claimed.Status.AccessRefusal != nil {
		t.Errorf("the claimed node keeps a refusal of the reservation before: %+v", claimed.Status.AccessRefusal)
	}
	if cleaned.Status.Cleaning.Reservation != "r1" || len(cleaned.Status.Cleaning.Steps) != 1 || cleaned.Status.AccessRefusal == nil {
		t.Errorf("the claim changed the node it was given: %+v", cleaned.Status)
	}

	// A refusal of the claiming reservation itself stays: its controller
	// reads it.
	cleaned.Status.AccessRefusal.ReservationUID = "uid-r2"
	if Claim(cleaned, next).Status.AccessRefusal == nil {
		t.Error("the claim dropped the refusal of the reservation it is for")
	}
}

func TestRecleanRefusesAReservedNode(t *testing.T) {
	if _, b := Reclean(nodeHeldBy("r1"), t0); b == nil || b.Reason != "NodeReserved" {
		t.Errorf("recleaning a reserved node: %+v", b)
	}
	held := nodeHeldBy("r1")
	held.Status.ReservationUID = "uid-r1"
	done := Handover(held, "r1", 5, []string{"alice"}, t0)
	done.Status.Cleaning.Phase = nodusv1.CleaningFailed
	n, b := Reclean(done, t0)
	if c := n.Status.Cleaning; b != nil || c.Request != 2 || c.Phase != nodusv1.CleaningPending || c.Epoch != 5 || c.ReservationUID != "uid-r1" {
		t.Errorf("recleaning: %+v %+v", n, b)
	}
}

func TestRecordCleaning(t *testing.T) {
	cleaning := func() *nodusv1.Node { return Handover(nodeHeldBy("r1"), "r1", 5, []string{"alice"}, t0) }
	ok := nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 5, Succeeded: true, Steps: []string{"home reset"}}
	cases := map[string]struct {
		node        *nodusv1.Node
		ev          nodusv1.CleaningEvidence
		changed     bool
		state       nodusv1.ProvisionState
		phase       nodusv1.CleaningPhase
		maintenance bool
	}{
		"success makes the node available": {node: cleaning(), ev: ok, changed: true,
			state: nodusv1.ProvisionStateAvailable, phase: nodusv1.CleaningSucceeded},
		"a failure never does, and asks for maintenance": {node: cleaning(),
			ev:      nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 5, Message: "clean command exited 3"},
			changed: true, state: nodusv1.ProvisionStateCleaning, phase: nodusv1.CleaningFailed, maintenance: true},
		"evidence of an older request counts for nothing": {node: func() *nodusv1.Node { n := cleaning(); n.Status.Cleaning.Request = 2; return n }(),
			ev: ok, state: nodusv1.ProvisionStateCleaning, phase: nodusv1.CleaningPending},
		"evidence from before the retirement counts for nothing": {node: cleaning(),
			ev: nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 4, Succeeded: true}, state: nodusv1.ProvisionStateCleaning, phase: nodusv1.CleaningPending},
		// The agent could not record the retirement it follows, so it has
		// no epoch to name: the cleaning failed, and waits for nothing more.
		"a failure from before the retirement still fails it": {node: cleaning(),
			ev:      nodusv1.CleaningEvidence{Request: 1, Message: "recording the retirement: disk full"},
			changed: true, state: nodusv1.ProvisionStateCleaning, phase: nodusv1.CleaningFailed, maintenance: true},
		"a success whose command exited non-zero is a failure": {node: cleaning(),
			ev:      nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 5, Succeeded: true, CommandExitCode: new(int32(3))},
			changed: true, state: nodusv1.ProvisionStateCleaning, phase: nodusv1.CleaningFailed, maintenance: true},
		"a repeated report changes nothing": {node: func() *nodusv1.Node { return RecordCleaning(cleaning(), ok, 1, t0).Node }(),
			ev: ok, state: nodusv1.ProvisionStateAvailable, phase: nodusv1.CleaningSucceeded},
		"no cleaning asked for": {node: nodeHeldBy("r1"), ev: ok, state: nodusv1.ProvisionStateActive},
	}
	for name, tc := range cases {
		out := RecordCleaning(tc.node, tc.ev, 3, t0)
		if (out.Node != nil) != tc.changed {
			t.Errorf("%s: changed %v, want %v", name, out.Node != nil, tc.changed)
		}
		n := tc.node
		if out.Node != nil {
			n = out.Node
			if n.Status.Cleaning.AgentGeneration != 3 || n.Status.Cleaning.CompletedAt == nil {
				t.Errorf("%s: the evidence is not recorded: %+v", name, n.Status.Cleaning)
			}
		}
		if n.Status.ProvisionState != tc.state {
			t.Errorf("%s: provision state %s, want %s", name, n.Status.ProvisionState, tc.state)
		}
		if n.Status.Cleaning != nil && n.Status.Cleaning.Phase != tc.phase {
			t.Errorf("%s: phase %s, want %s", name, n.Status.Cleaning.Phase, tc.phase)
		}
		if (out.Maintenance != "") != tc.maintenance {
			t.Errorf("%s: maintenance %q", name, out.Maintenance)
		}
	}
}

func TestClaimBlocker(t *testing.T) {
	r1 := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "u1"}}
	r2 := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r2", UID: "u2"}}
	ownClaim := nodeHeldBy("r1")
	ownClaim.Status.ReservationUID = "u1"
	if b := ClaimBlocker(r1, "n1", nil); b == nil || b.Reason != "NodeNotFound" {
		t.Errorf("unknown node: %+v", b)
	}
	if b := ClaimBlocker(r1, "n1", ownClaim); b != nil {
		t.Errorf("its own node: %+v", b)
	}
	if b := ClaimBlocker(r2, "n1", ownClaim); b == nil || b.Reason != "NodeReserved" {
		t.Errorf("another's node: %+v", b)
	}
	again := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: "u3"}}
	if b := ClaimBlocker(again, "n1", ownClaim); b == nil || b.Reason != "NodeReserved" || !strings.Contains(b.Message, "earlier reservation named r1") {
		t.Errorf("a node an earlier reservation of the name holds: %+v", b)
	}
	// A claim written before claims carried a UID: its reservation's only
	// on the node that reservation was given.
	legacy := nodeHeldBy("r1")
	if b := ClaimBlocker(again, "n1", legacy); b == nil || b.Reason != "NodeReserved" {
		t.Errorf("a claim without a UID, for a reservation never given the node: %+v", b)
	}
	given := again.DeepCopy()
	given.Status.Node = "n1"
	if b := ClaimBlocker(given, "n1", legacy); b != nil {
		t.Errorf("a claim without a UID, of the reservation given the node: %+v", b)
	}
	// A cleaning that failed is not one going on: the reservation waits on
	// an operator, and says so, without the agent's words, which name what
	// the previous tenant left (the next tenant may read this message).
	cleaning := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateCleaning,
		Cleaning: &nodusv1.NodeCleaning{Request: 3, Phase: nodusv1.CleaningPending}}}
	if b := ClaimBlocker(r2, "n1", cleaning); b == nil || b.Reason != "NodeCleaning" || !strings.Contains(b.Message, "is being cleaned") {
		t.Errorf("a node being cleaned: %+v", b)
	}
	failed := cleaning.DeepCopy()
	failed.Status.Cleaning.Phase, failed.Status.Cleaning.Message = nodusv1.CleaningFailed, "resetting ops: removing files in /tmp: permission denied"
	failed.Spec.Maintenance = true
	if b := ClaimBlocker(r2, "n1", failed); b == nil || b.Reason != "NodeCleaning" || strings.Contains(b.Message, "is being cleaned") ||
		!strings.Contains(b.Message, "failed (cleaning request 3)") || strings.Contains(b.Message, "resetting ops") ||
		!strings.Contains(b.Message, "nodus nodes clean n1") {
		t.Errorf("a node whose cleaning failed: %+v", b)
	}
}

func TestDrainNeedsCurrentEvidence(t *testing.T) {
	releasing := func() *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1"},
			Status: nodusv1.ReservationStatus{State: nodusv1.ReservationStateActive, Epoch: 1, Node: "n1"}}
		Release(r, "nodus-cli", t0)
		return r
	}
	ending := func() *nodusv1.Reservation {
		return &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1"},
			Status: nodusv1.ReservationStatus{State: nodusv1.ReservationStateEnding, Epoch: 2, Node: "n1"}}
	}
	lost := func() *nodusv1.Reservation {
		r := ending()
		r.Status.Conditions = []metav1.Condition{{Type: "Placed", Status: metav1.ConditionFalse, Reason: string(apierror.ReasonNodeLost)}}
		return r
	}
	ok := nodusv1.ReservationEvidence{Name: "r1", AppliedEpoch: 2}
	cases := map[string]struct {
		r     *nodusv1.Reservation
		node  string
		ev    nodusv1.ReservationEvidence
		state nodusv1.ReservationState
	}{
		"a drained release":         {releasing(), "n1", ok, nodusv1.ReservationStateReleased},
		"a drained term end":        {ending(), "n1", ok, nodusv1.ReservationStateEnded},
		"the old epoch":             {releasing(), "n1", nodusv1.ReservationEvidence{AppliedEpoch: 1}, nodusv1.ReservationStateReleasing},
		"an owner session left":     {releasing(), "n1", nodusv1.ReservationEvidence{AppliedEpoch: 2, OwnerSessions: 1}, nodusv1.ReservationStateReleasing},
		"a borrower execution left": {releasing(), "n1", nodusv1.ReservationEvidence{AppliedEpoch: 2, BorrowerExecutions: 1}, nodusv1.ReservationStateReleasing},
		"another node's report":     {releasing(), "n2", ok, nodusv1.ReservationStateReleasing},
		// The sessions and executions counted on a node another reservation holds are that one's.
		"a lost node's end, with the holder's sessions": {lost(), "n1", nodusv1.ReservationEvidence{AppliedEpoch: 2, OwnerSessions: 3, BorrowerExecutions: 1}, nodusv1.ReservationStateEnded},
		"a lost node's end needs its epoch applied":     {lost(), "n1", nodusv1.ReservationEvidence{AppliedEpoch: 1}, nodusv1.ReservationStateEnding},
		"an active reservation stays":                   {&nodusv1.Reservation{Status: nodusv1.ReservationStatus{State: nodusv1.ReservationStateActive, Epoch: 2, Node: "n1"}}, "n1", ok, nodusv1.ReservationStateActive},
	}
	for name, tc := range cases {
		changed := Drain(tc.r, tc.node, tc.ev, t0)
		if tc.r.Status.State != tc.state || changed != (tc.state == nodusv1.ReservationStateReleased || tc.state == nodusv1.ReservationStateEnded) {
			t.Errorf("%s: state %s (changed %v), want %s", name, tc.r.Status.State, changed, tc.state)
		}
	}
	if r := releasing(); r.Status.Epoch != 2 || r.Status.Release == nil {
		t.Errorf("a release raises the epoch once and records the request: %+v", r.Status)
	}
}

// TestMaintenanceReasonKeepsWholeCharacters: the reason is cut to its
// bound on a character's edge, whatever the agent's message is.
func TestMaintenanceReasonKeepsWholeCharacters(t *testing.T) {
	for _, m := range []string{strings.Repeat("é", 150), strings.Repeat("x", 1) + strings.Repeat("€", 100), "short"} {
		got := MaintenanceReason(&nodusv1.NodeCleaning{Request: 3, Message: m})
		if !utf8.ValidString(got) || len(got) > maxMaintenanceReason || !strings.HasPrefix(got, "cleaning request 3 failed") {
			t.Errorf("the reason for a message of %d bytes: %d bytes, valid UTF-8 %v: %q", len(m), len(got), utf8.ValidString(got), got)
		}
	}
}
