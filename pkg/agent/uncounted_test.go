package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// TestAnUncountedSessionHoldsTheRelease: the owner releases the host while
// the agent cannot read its processes (/proc not mounted, no file
// descriptor left). The agent counted the tenant's sessions as none, the
// server took that for the release's drain (released), and the tenant's
// session ran on into the handover. A count the agent could not make must
// hold the release; once the processes can be read again, the heartbeat
// ends the session, and only then reports none.
func TestAnUncountedSessionHoldsTheRelease(t *testing.T) {
	login, session, store := sessionAndStore(t, "nodus-uncounted")
	const uid = "3f6b2c1d-9e8a-4b7c-a6d5-e4f3a2b1c0d9"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "owner", uid
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	reservation := func(epoch int64, st nodusv1.ReservationState) *nodusv1.Reservation {
		t.Helper()
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "owner", UID: types.UID(uid)}}
		r.Spec.LoginUser, r.Spec.Project = login, "acme"
		r.Status.Epoch, r.Status.State, r.Status.LoginUser, r.Status.Node = epoch, st, login, node.Name
		return r
	}
	ctx := context.Background()
	a.apply(ctx, reservation(1, nodusv1.ReservationStateActive))
	ended := session()

	// A tree that is not there, so that no signal reaches the session
	// either: on a host, kill(-1) as the user would end it even unlisted.
	a.procs = sessions.Procs{Root: filepath.Join(t.TempDir(), "not-mounted")}
	releasing := reservation(1, nodusv1.ReservationStateActive)
	lifecycle.Release(releasing, "owner", time.Now())
	a.apply(ctx, releasing)
	if acc, ok, err := store.Applied(releasing.Name); err != nil || !ok || acc.Granted() || acc.Epoch != 2 {
		t.Fatalf("the release was not applied: %+v, %v", acc, err)
	}
	evidence := func() nodusv1.ReservationEvidence {
		applied, err := store.All()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range a.reservationEvidence(ctx, applied) {
			if e.Name == releasing.Name {
				return e
			}
		}
		t.Fatal("the heartbeat does not report the releasing reservation")
		return nodusv1.ReservationEvidence{}
	}
	got := evidence()
	if got.AppliedEpoch != 2 || got.OwnerSessions < 1 {
		t.Errorf("reported %+v while the host's processes cannot be read: the release would complete on sessions it did not count", got)
	}
	if res := releasing.DeepCopy(); lifecycle.Drain(res, node.Name, got, time.Now()) {
		t.Errorf("the server drained the release on that report: %s", res.Status.State)
	}
	select {
	case <-ended:
		t.Fatal("the session ended without being listed: nothing left to test")
	default:
	}

	// The ending that report started, in the background, is over (it could
	// not show the session ended) before the processes are read again.
	for ending := true; ending; {
		a.mu.Lock()
		ending = a.ending[login]
		a.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}

	// Readable again: the heartbeat counts the session, ends it, and then
	// reports none.
	a.procs = sessions.Procs{Root: "/proc"}
	if got := evidence(); got.OwnerSessions != 1 {
		t.Errorf("the session left running: %+v", got)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat did not end the session left running")
	}
	deadline := time.Now().Add(10 * time.Second)
	for evidence().OwnerSessions != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions still reported after the session ended: %+v", evidence())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res := releasing.DeepCopy(); !lifecycle.Drain(res, node.Name, evidence(), time.Now()) {
		t.Error("the release was not drained once the sessions were counted and none was left")
	}
}
