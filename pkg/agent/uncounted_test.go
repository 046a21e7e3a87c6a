package agent

import (
	"context"
	"errors"
	"os/user"
	"path/filepath"
	"strings"
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
// descriptor left) or the login user's account (passwd unreadable, a
// directory service that does not answer). The agent counted the tenant's
// sessions as none (for an account it could not look up, it took the
// tenant for a service), the server took that for the release's drain
// (released), and the tenant's session ran on into the handover. A count
// the agent could not make must hold the release, an account it cannot
// look up is neither granted nor passed over by a cleaning, and once it
// can read again, the heartbeat ends the session and only then reports
// none.
func TestAnUncountedSessionHoldsTheRelease(t *testing.T) {
	unanswered := func(string) (*user.User, error) { return nil, errors.New("no answer from the directory") }
	for _, blind := range []struct {
		name  string
		procs sessions.Procs
	}{
		// Not there at all, so that no signal reaches the session either:
		// on a host, kill(-1) as the user would end it even unlisted.
		{"without /proc", sessions.Procs{Root: filepath.Join(t.TempDir(), "not-mounted")}},
		{"without the account", sessions.Procs{Root: "/proc", Lookup: unanswered}},
	} {
		t.Run(blind.name, func(t *testing.T) {
			login, session, store := sessionAndStore(t, "nodus-uncounted")
			const uid = "3f6b2c1d-9e8a-4b7c-a6d5-e4f3a2b1c0d9"
			node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			node.Status.Reservation, node.Status.ReservationUID = "owner", uid
			a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
			r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "owner", UID: types.UID(uid)}}
			r.Spec.LoginUser, r.Spec.Project = login, "acme"
			r.Status.Epoch, r.Status.State, r.Status.LoginUser, r.Status.Node = 1, nodusv1.ReservationStateActive, login, node.Name
			ctx := context.Background()
			// settled waits for the endings the heartbeat started in the
			// background. Also before the account goes: its uid goes to
			// the next test's account, which an ending still in flight
			// would reach.
			settled := func() {
				for ending := true; ending; {
					a.mu.Lock()
					ending = a.ending[login]
					a.mu.Unlock()
					time.Sleep(10 * time.Millisecond)
				}
			}
			t.Cleanup(settled)
			a.apply(ctx, r)
			ended := session()

			if blind.procs.Lookup != nil {
				// sshd's principals for the login user, as nodusd serves them.
				socket := filepath.Join(t.TempDir(), "principals.sock")
				serveCtx, stop := context.WithCancel(ctx)
				t.Cleanup(stop)
				go func() { _ = a.servePrincipals(serveCtx, socket) }()
				principals := func() string {
					var out strings.Builder
					for range 50 {
						if err := Principals(socket, login, &out); err == nil {
							break
						}
						time.Sleep(20 * time.Millisecond) // the socket is not there yet
					}
					return strings.TrimSpace(out.String())
				}
				if principals() == "" {
					t.Fatal("no principal for the access applied: the test does not test the case")
				}
				a.procs = blind.procs
				if err := a.refuseLoginUser(login); !errors.Is(err, errAccountUnreadable) {
					t.Errorf("an account that cannot be looked up may be granted: %v", err)
				}
				if got := principals(); got != "" {
					t.Errorf("sshd is given principals for an account nodusd cannot look up: %q", got)
				}
			}
			a.procs = blind.procs
			releasing := r.DeepCopy()
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
				t.Errorf("reported %+v: the release would complete on sessions it did not count", got)
			}
			if res := releasing.DeepCopy(); lifecycle.Drain(res, node.Name, got, time.Now()) {
				t.Errorf("the server drained the release on that report: %s", res.Status.State)
			}
			if blind.procs.Lookup != nil {
				if ev := a.clean(ctx, &nodusv1.NodeCleaning{Request: 1, Users: []string{login}}); ev.Succeeded || !strings.Contains(ev.Message, "cannot tell whether to reset "+login) {
					t.Errorf("a cleaning of an account that cannot be looked up: %+v", ev)
				}
			}
			select {
			case <-ended:
				t.Fatal("the session ended unseen: nothing left to test")
			default:
			}
			// The ending that report started, in the background, is over
			// (it could not show the session ended) before the agent reads
			// again.
			settled()

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
		})
	}
}
