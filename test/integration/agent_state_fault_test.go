package integration

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestARetirementTheAgentCannotRecordStillRefusesLogins: nodusd records
// the access it applies in its state database, and sshd's principals come
// from there. A release whose record fails (a full or failing disk) must
// not leave the released tenant's principal served: the agent refuses it
// at once, ends the sessions, and records the retirement once it can; only
// then does its heartbeat report the new epoch, and the release complete.
// The failing disk is the database file made immutable (chattr +i).
func TestARetirementTheAgentCannotRecordStillRefusesLogins(t *testing.T) {
	canFailWrites(t)
	s, f, dir, principalsOf := servedAgent(t)
	principals := func() string { return principalsOf("nodus-test-login") }

	db := filepath.Join(dir, "state.db")
	failWrites(t, db)
	if r := f.release(t, f.admin, "agent-1", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return principals() == "", nil }); err != nil {
		t.Fatalf("the released tenant's principal is still served while its retirement is not recorded: %q", principals())
	}
	time.Sleep(2 * time.Second) // retries that cannot land
	if h := f.waitHost(t, "agent-1", func(*nodusv1.ReservedHost) bool { return true }); h.Status.Reservation.State != nodusv1.ReservationStateReleasing {
		t.Errorf("the release completed before the agent recorded it: %s", h.Status.Reservation.State)
	}
	if p := principals(); p != "" {
		t.Errorf("a principal came back while the retirement is still not recorded: %q", p)
	}

	if out, err := exec.Command("chattr", "-i", db).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateReleased
	})
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "agent-1", metav1.GetOptions{})
	if err != nil || n.Status.AppliedEpoch != 2 {
		t.Errorf("the applied epoch once recorded: %v %+v", err, n.Status)
	}
	if p := principals(); p != "" {
		t.Errorf("principals after the release: %q", p)
	}
}

// TestALoginUserChangeTheAgentRefusesEndsTheOldAccess: a reservation's
// login user changed to an account nodusd never grants (a system account)
// raises the epoch; the agent grants nothing to the new account, and the
// old account's principal, of the old epoch, must not stay served either.
func TestALoginUserChangeTheAgentRefusesEndsTheOldAccess(t *testing.T) {
	if _, err := user.Lookup("daemon"); err != nil {
		t.Skip("no system account daemon on this host")
	}
	s, f, _, principals := servedAgent(t)
	if _, err := s.Client.NodusV1().Reservations().Patch(ctx(t), "agent-1", types.MergePatchType, []byte(`{"spec":{"loginUser":"daemon"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := s.Client.NodusV1().Reservations().Get(cx, "agent-1", metav1.GetOptions{})
		return err == nil && r.Status.Epoch == 2, err
	}); err != nil {
		t.Fatalf("the login-user change never raised the epoch: %v", err)
	}
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return principals("nodus-test-login") == "", nil }); err != nil {
		t.Errorf("the old account's principal is still served after its access changed: %q", principals("nodus-test-login"))
	}
	if p := principals("daemon"); p != "" {
		t.Errorf("the agent serves a principal for a system account: %q", p)
	}
	// The tenant is shown why: the agent's refusal, at the new epoch.
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool { return accessRefused(h, 2, `"daemon" is a system account`) })
}

// TestTheTenantIsShownWhyTheHostRefusesItsAccess: a reservation whose
// login user the host's agent never grants (here a system account) stays
// without access on the host; before, only the host's log said why, and
// the tenant saw "the host's agent applied epoch 0". The agent reports its
// refusal with its heartbeats, the host's Connected condition shows it,
// and it goes once the login user is one the agent grants.
func TestTheTenantIsShownWhyTheHostRefusesItsAccess(t *testing.T) {
	if _, err := user.Lookup("daemon"); err != nil {
		t.Skip("no system account daemon on this host")
	}
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "daemon"}, dir)
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Socket: filepath.Join(dir, "p.sock")})
	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool { return accessRefused(h, 1, `"daemon" is a system account`) })
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "agent-1", metav1.GetOptions{})
	if err != nil || n.Status.AccessRefusal == nil || n.Status.AppliedEpoch != 0 {
		t.Fatalf("the node after the refusal: %v %+v", err, n.Status)
	}

	if _, err := s.Client.NodusV1().Reservations().Patch(ctx(t), "agent-1", types.MergePatchType, []byte(`{"spec":{"loginUser":"nodus-test-login"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h := f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	n, err = s.Client.NodusV1().Nodes().Get(ctx(t), "agent-1", metav1.GetOptions{})
	if err != nil || n.Status.AccessRefusal != nil || n.Status.AppliedEpoch != h.Status.Reservation.Epoch {
		t.Errorf("the node once the agent grants the access: %v %+v", err, n.Status)
	}
}

// accessRefused says whether h shows its agent's refusal of epoch, saying why.
func accessRefused(h *nodusv1.ReservedHost, epoch int64, why string) bool {
	c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "AccessRefused" && h.Status.Reservation.Epoch == epoch &&
		strings.Contains(c.Message, why)
}

// servedAgent is servedAgentOf node agent-1 with login user nodus-test-login.
func servedAgent(t *testing.T) (s *testserver.Server, f *fleet, dir string, principals func(login string) string) {
	t.Helper()
	return servedAgentOf(t, "agent-1", "nodus-test-login")
}

// servedAgentOf is a server with the fleet, the real agent of node (login
// user login) in dir, and node reserved to acme under its name, once the
// agent serves the tenant's principal; principals asks the agent for a
// login user's, as sshd does.
func servedAgentOf(t *testing.T, node, login string) (s *testserver.Server, f *fleet, dir string, principals func(login string) string) {
	t.Helper()
	s = testserver.StartTestServer(t)
	f = newFleet(t, s)
	dir = t.TempDir()
	enrollAgent(t, s, node, nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: login}, dir)
	socket := filepath.Join(dir, "p.sock")
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Socket: socket})
	principals = func(login string) string {
		var out strings.Builder
		_ = agent.Principals(socket, login, &out)
		return strings.TrimSpace(out.String())
	}
	f.reserve(t, node, nodusv1.ReservationPlacement{Node: node}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) { return principals(login) != "", nil }); err != nil {
		t.Fatalf("the agent never served the tenant's principal: %v", err)
	}
	return s, f, dir, principals
}

// TestARetiredSystemAccountKeepsItsProcesses: the server names a system
// account as the login user (here daemon, after the tenant's), the
// reservation is released and then deleted. The agent never granted the
// account: its processes are a service's, not a tenant's sessions, and
// neither hold the release up nor end with the reservation's retirement.
func TestARetiredSystemAccountKeepsItsProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a process as the system account daemon (CI runs as root)")
	}
	if _, err := user.Lookup("daemon"); err != nil {
		t.Skip("no system account daemon on this host")
	}
	ended := sleepAs(t, "daemon")

	s, f, _, _ := servedAgent(t)
	if _, err := s.Client.NodusV1().Reservations().Patch(ctx(t), "agent-1", types.MergePatchType, []byte(`{"spec":{"loginUser":"daemon"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The login-user change raised the epoch to 2.
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool { return h.Status.Reservation.Epoch == 2 })
	if r := f.release(t, f.admin, "agent-1", `{"agreed":true,"epoch":2}`, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	// The account's processes are no tenant's sessions: the release drains.
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateReleased
	})
	if err := s.Client.NodusV1().Reservations().Delete(ctx(t), "agent-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node is cleaned after the deleted reservation once the agent has
	// retired it.
	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		return n.Status.Cleaning != nil && n.Status.Cleaning.Phase != nodusv1.CleaningPending
	})
	select {
	case <-ended:
		t.Error("retiring the reservation ended a process of the system account daemon")
	case <-time.After(time.Second):
	}
}

// TestPrincipalsAreOfTheLoginNamedExactly: sshd asks for the principals of
// the account a connection names, whatever characters its name has (names
// from LDAP or useradd --badname): an account whose name a URL would read
// as the login user's (login#x, login&y, an escaped letter) gets none of
// its principals.
func TestPrincipalsAreOfTheLoginNamedExactly(t *testing.T) {
	_, _, _, principals := servedAgent(t)
	for _, other := range []string{"nodus-test-login#x", "nodus-test-login&user=x", "nodus%2Dtest-login", "nodus-test-login?", "nodus-test-login "} {
		if got := principals(other); got != "" {
			t.Errorf("account %q gets the principals of nodus-test-login: %q", other, got)
		}
	}
}

// TestALoginThatStartsAfterTheCleaningIsEnded: sshd lets a connection in
// on a principal it read just before the reservation's retirement, and
// its PAM session may take seconds before the login's first process runs
// as the account: after the agent's sweeps and the cleaning's. The agent's
// heartbeats end it, as they end what a release left, although the
// reservation (here deleted) is no longer on the node.
func TestALoginThatStartsAfterTheCleaningIsEnded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a login account of its own, whose processes the agent ends (CI runs as root)")
	}
	login := loginAccount(t)
	s, _, _, _ := servedAgentOf(t, "late", login)
	if err := s.Client.NodusV1().Reservations().Delete(ctx(t), "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 60*time.Second, func(cx context.Context) (bool, error) {
		n, err := s.Client.NodusV1().Nodes().Get(cx, "late", metav1.GetOptions{})
		return err == nil && n.Status.Cleaning != nil && n.Status.Cleaning.Phase == nodusv1.CleaningSucceeded, nil
	}); err != nil {
		t.Fatalf("the cleaning after the deletion never succeeded: %v", err)
	}
	ended := sleepAs(t, login) // the late login's first process
	select {
	case <-ended:
	case <-time.After(45 * time.Second):
		t.Error("a process of the account whose reservation was deleted still runs after three heartbeats")
	}
}

// canFailWrites skips a test that fails the agent's writes of its state
// database (failWrites) where it cannot: it needs root and chattr.
func canFailWrites(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes the agent's state database immutable (CI runs as root)")
	}
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("chattr (e2fsprogs) is not installed")
	}
}

// failWrites makes file immutable (chattr +i), as a failing disk for the
// process that holds it open, until the test ends; it skips where the
// filesystem takes no such attribute, or where one still lets a file held
// open be written (the failure the test needs would not come).
func failWrites(t *testing.T, file string) {
	t.Helper()
	probe, err := os.OpenFile(filepath.Join(filepath.Dir(file), "immutable-probe"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if out, err := exec.Command("chattr", "+i", probe.Name()).CombinedOutput(); err != nil {
		t.Skipf("the filesystem takes no immutable attribute: %v %s", err, out)
	}
	_, written := probe.Write([]byte("x"))
	if out, err := exec.Command("chattr", "-i", probe.Name()).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	if written == nil {
		t.Skip("the filesystem lets a file held open be written though it is immutable")
	}
	if out, err := exec.Command("chattr", "+i", file).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", file).Run() })
}
