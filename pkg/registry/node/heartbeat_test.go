package node

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// TestAnOldCredentialsBeatIsNotHeard: a watch cache that has not seen a
// re-enrollment lets the previous agent's credential (generation 1) past
// the authorizer; its beat, naming the new generation read from etcd, must
// still not count — its evidence would release reservations and record
// cleanings in the new agent's name.
func TestAnOldCredentialsBeatIsNotHeard(t *testing.T) {
	agentOf := func(generation, uid string) user.Info {
		return &user.DefaultInfo{Name: auth.NodeUserPrefix + "n1", Groups: []string{auth.GroupNodes, auth.GroupAuthenticated},
			Extra: map[string][]string{auth.ExtraAgentGeneration: {generation}, auth.ExtraNodeUID: {uid}}}
	}
	operator := &user.DefaultInfo{Name: "admin", Groups: []string{auth.GroupAuthenticated}}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}, Status: nodusv1.NodeStatus{AgentGeneration: 2}}
	cases := []struct {
		name       string
		u          user.Info
		generation int64
		heard      string // "" when it is heard, else a word of why not
	}{
		{"the current agent", agentOf("2", "uid-1"), 2, ""},
		{"the previous agent naming the new generation", agentOf("1", "uid-1"), 2, "credential is of generation 1"},
		{"the previous agent naming its own", agentOf("1", "uid-1"), 1, "generation 1"},
		{"a deleted namesake's agent", agentOf("2", "uid-0"), 2, "deleted"},
		{"an operator naming the generation", operator, 2, ""},
		{"an operator naming another", operator, 1, "not node \"n1\"'s current generation 2"},
	}
	for _, tc := range cases {
		why := staleBeat(tc.u, &nodusv1.NodeHeartbeat{AgentGeneration: tc.generation}, node)
		if (why == "") != (tc.heard == "") || !strings.Contains(why, tc.heard) {
			t.Errorf("%s: staleBeat = %q, want %q", tc.name, why, tc.heard)
		}
	}
}

// TestEvidenceTheCacheCannotSettleGoesToEtcd: a beat's evidence is answered
// from the watch cache only when no later version of the reservation could
// make it count (drain it); anything that may change state, and anything
// the cache may merely be behind on, is judged on the reservation as stored.
func TestEvidenceTheCacheCannotSettleGoesToEtcd(t *testing.T) {
	at := func(state nodusv1.ReservationState, node string, epoch int64) *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r1"}}
		r.Status.State, r.Status.Node, r.Status.Epoch = state, node, epoch
		if state == nodusv1.ReservationStateReleasing {
			r.Status.Release = &nodusv1.ReservedHostReleaseStatus{}
		}
		return r
	}
	applied := func(epoch int64, sessions int32) nodusv1.ReservationEvidence {
		return nodusv1.ReservationEvidence{Name: "r1", AppliedEpoch: epoch, OwnerSessions: sessions}
	}
	cases := []struct {
		name          string
		cached        *nodusv1.Reservation
		evidence      nodusv1.ReservationEvidence
		live, settled bool
	}{
		{"active, its epoch applied", at(nodusv1.ReservationStateActive, "n1", 3), applied(3, 0), true, true},
		{"active, the agent behind", at(nodusv1.ReservationStateActive, "n1", 3), applied(2, 0), true, true},
		{"releasing, someone logged in", at(nodusv1.ReservationStateReleasing, "n1", 4), applied(4, 1), true, true},
		{"final in the cache", at(nodusv1.ReservationStateReleased, "n1", 4), applied(4, 0), false, true},
		{"releasing, drained", at(nodusv1.ReservationStateReleasing, "n1", 4), applied(4, 0), false, false},
		{"ending, drained", at(nodusv1.ReservationStateEnding, "n1", 4), applied(4, 0), false, false},
		{"the cache behind the agent", at(nodusv1.ReservationStateActive, "n1", 3), applied(4, 0), false, false},
		{"not in the cache", nil, applied(3, 0), false, false},
		{"on another node in the cache", at(nodusv1.ReservationStateActive, "n2", 3), applied(3, 0), false, false},
	}
	for _, tc := range cases {
		live, settled := judgedByCache(tc.cached, "n1", tc.evidence)
		if live != tc.live || settled != tc.settled {
			t.Errorf("%s: judgedByCache = live %v, settled %v; want %v, %v", tc.name, live, settled, tc.live, tc.settled)
		}
	}
}

// TestABeatThatRevivedTheLeaseWritesTheNode: the liveness controller read
// a node (Ready) and found its lease gone; a beat then revives the lease.
// Were the beat to write nothing (the node as it read it is Ready, and a
// Ready node's beats write nothing however old its stored beat time), the
// controller's NotReady would land after it, under what it read, and hold
// until the next beat. A beat that revived the lease writes the node, so
// that that NotReady conflicts.
func TestABeatThatRevivedTheLeaseWritesTheNode(t *testing.T) {
	h := &HeartbeatREST{}
	now := metav1.NewTime(time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC))
	old := metav1.NewTime(now.Add(-time.Hour))
	ready := &nodusv1.Node{Status: nodusv1.NodeStatus{AppliedEpoch: 3, LastHeartbeatTime: &old, ProvisionState: nodusv1.ProvisionStateAvailable,
		Conditions: []metav1.Condition{{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived"}}}}
	if h.nodeChanged(ready, 3, nil, now, false) {
		t.Error("a beat of a Ready node, its lease alive, writes the node because its stored beat time is an hour old")
	}
	if !h.nodeChanged(ready, 3, nil, now, true) {
		t.Fatal("a beat that revived the lease does not write the node")
	}
	written := ready.DeepCopy()
	h.applyBeat(written, 3, nil, now)
	if !written.Status.LastHeartbeatTime.Equal(&now) {
		t.Errorf("the beat that revived the lease wrote beat time %v, want %v", written.Status.LastHeartbeatTime, now)
	}
}
