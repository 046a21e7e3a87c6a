package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes the agent's state database immutable (CI runs as root)")
	}
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("chattr (e2fsprogs) is not installed")
	}
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, dir)
	socket := filepath.Join(dir, "p.sock")
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Socket: socket})
	principals := func() string {
		var out strings.Builder
		_ = agent.Principals(socket, "nodus-test-login", &out)
		return strings.TrimSpace(out.String())
	}
	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) { return principals() != "", nil }); err != nil {
		t.Fatalf("the agent never served the tenant's principal: %v", err)
	}

	db := filepath.Join(dir, "state.db")
	if out, err := exec.Command("chattr", "+i", db).CombinedOutput(); err != nil {
		t.Skipf("the state directory's filesystem takes no immutable attribute: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", db).Run() })
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
