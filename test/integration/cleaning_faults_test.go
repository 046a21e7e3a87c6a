package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/agent/cleaning"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestCleaningFaults runs the real agent's handover cleaning through its
// faults: an operator's clean command that fails puts the node in
// maintenance, never available; an agent restarted in the middle of a
// cleaning does it again from the start; a command that hangs is killed at
// its timeout and fails the cleaning; only a clean that works hands on.
func TestCleaningFaults(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "cleaner", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, dir)
	// A scratch host tree: the account the token names does not exist
	// here, so only the operator's command does anything.
	scratch := t.TempDir()
	paths := cleaning.Paths{Skel: filepath.Join(scratch, "skel"), TempDirs: []string{filepath.Join(scratch, "tmp")}}
	start := func(command string, timeout time.Duration) (stop func()) {
		t.Helper()
		a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, CleanCommand: command,
			CleanTimeout: timeout, CleaningPaths: &paths})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = a.Run(runCtx); close(done) }()
		stopped := false
		stop = func() {
			if !stopped {
				stopped = true
				cancel()
				<-done
			}
		}
		t.Cleanup(stop)
		return stop
	}

	stop := start("echo wiping scratch; exit 3", time.Minute)
	now := time.Now()
	f.reserve(t, "cleaner", nodusv1.ReservationPlacement{Node: "cleaner"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "cleaner", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if r := f.release(t, f.admin, "cleaner", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	failed := waitNode(t, s, "cleaner", func(n *nodusv1.Node) bool { return n.Spec.Maintenance })
	if c := failed.Status.Cleaning; failed.Status.ProvisionState != nodusv1.ProvisionStateCleaning || c.Phase != nodusv1.CleaningFailed ||
		c.CommandExitCode == nil || *c.CommandExitCode != 3 || !strings.Contains(c.CommandOutput, "wiping scratch") ||
		!strings.Contains(failed.Spec.MaintenanceReason, "the clean command exited 3") {
		t.Fatalf("a failed clean command: %+v %+v", failed.Spec, failed.Status)
	}
	stop()

	// The operator cleans again; the agent is restarted in the middle of it.
	marker := filepath.Join(scratch, "started")
	stop = start("touch "+marker+"; sleep 30", 3*time.Second)
	if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/nodes/cleaner/clean", "application/json", strings.NewReader(`{}`)); r.code != 201 && r.code != 200 {
		t.Fatalf("clean again: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) {
		_, err := os.Stat(marker)
		return err == nil, nil
	}); err != nil {
		t.Fatal("the agent never started the clean command")
	}
	stop()
	if n := waitNode(t, s, "cleaner", func(*nodusv1.Node) bool { return true }); n.Status.Cleaning.Phase != nodusv1.CleaningPending ||
		n.Status.Cleaning.Request != 2 {
		t.Fatalf("an agent stopped in the middle reported: %+v", n.Status.Cleaning)
	}
	_ = os.Remove(marker)
	// The restarted agent does it again: the command hangs and is killed at its timeout.
	stop = start("touch "+marker+"; sleep 30", 2*time.Second)
	hung := waitNode(t, s, "cleaner", func(n *nodusv1.Node) bool {
		return n.Status.Cleaning.Request == 2 && n.Status.Cleaning.Phase == nodusv1.CleaningFailed
	})
	if _, err := os.Stat(marker); err != nil || !strings.Contains(hung.Status.Cleaning.Message, "did not finish within 2s") ||
		hung.Status.ProvisionState != nodusv1.ProvisionStateCleaning {
		t.Fatalf("a hanging clean command: %v %+v", err, hung.Status)
	}
	stop()

	stop = start("true", time.Minute)
	if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/nodes/cleaner/clean", "application/json", strings.NewReader(`{}`)); r.code != 201 && r.code != 200 {
		t.Fatalf("clean again: %d %s", r.code, r.body)
	}
	done := waitNode(t, s, "cleaner", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable })
	if c := done.Status.Cleaning; c.Request != 3 || c.Phase != nodusv1.CleaningSucceeded || *c.CommandExitCode != 0 || !done.Spec.Maintenance {
		t.Errorf("after a clean that works: %+v %+v (maintenance stays until the operator ends it)", done.Spec, c)
	}
	stop()
}

// TestACleaningItsRecordDoesNotTakeFails: nodusd records in its state
// database that a cleaning discharged what the accesses before it owed
// (session 59), before the server hears of the success, which then lets
// the next tenant claim the node. A database that reads but does not
// write (a failing disk; here the file made immutable, chattr +i) must
// fail the cleaning, not hand the node on with nodusd's own record still
// refusing the next tenant, or (the record lost) the next cleaning naming
// less than is owed.
func TestACleaningItsRecordDoesNotTakeFails(t *testing.T) {
	canFailWrites(t)
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "unrecorded", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, dir)
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, CleanCommand: "true", CleaningPaths: scratchCleaningPaths(t)})
	waitNode(t, s, "unrecorded", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable })

	db := filepath.Join(dir, "state.db")
	failWrites(t, db)
	clean := func() {
		t.Helper()
		if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/nodes/unrecorded/clean", "application/json", strings.NewReader(`{}`)); r.code != 201 && r.code != 200 {
			t.Fatalf("clean: %d %s", r.code, r.body)
		}
	}
	clean()
	failed := waitNode(t, s, "unrecorded", func(n *nodusv1.Node) bool {
		return n.Status.Cleaning != nil && n.Status.Cleaning.Phase != nodusv1.CleaningPending
	})
	if c := failed.Status.Cleaning; c.Phase != nodusv1.CleaningFailed || !strings.Contains(c.Message, "recording the cleaning in the state database") ||
		failed.Status.ProvisionState != nodusv1.ProvisionStateCleaning {
		t.Fatalf("a cleaning whose record did not take: %s, %+v", failed.Status.ProvisionState, c)
	}
	waitNode(t, s, "unrecorded", func(n *nodusv1.Node) bool { return n.Spec.Maintenance })

	// Once the database writes again, the operator's next cleaning hands on.
	if out, err := exec.Command("chattr", "-i", db).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	clean()
	done := waitNode(t, s, "unrecorded", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable })
	if c := done.Status.Cleaning; c.Request != 2 || c.Phase != nodusv1.CleaningSucceeded {
		t.Errorf("the cleaning after the database wrote again: %+v", c)
	}
}

// scratchCleaningPaths is a host tree of the test's own for an agent's
// cleaning (a skeleton, a temporary directory): a cleaning then touches
// nothing of this machine's but the accounts it resets.
func scratchCleaningPaths(t *testing.T) *cleaning.Paths {
	t.Helper()
	scratch := t.TempDir()
	paths := &cleaning.Paths{Skel: filepath.Join(scratch, "skel"), TempDirs: []string{filepath.Join(scratch, "tmp")}}
	if err := os.Mkdir(paths.Skel, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range paths.TempDirs {
		if err := os.Mkdir(d, 0o1777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o1777); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	return paths
}
