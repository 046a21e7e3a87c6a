package sessions

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testhost"
)

// TestEndSessionsEndsAProcessThatKeepsChangingItsPID: a tenant's process
// that forks and exits in a loop is gone before /proc is read, and its
// child was not listed. Ending the tenant's sessions must end it anyway,
// or it outlives the release and the cleaning, as the uid the next tenant
// gets.
func TestEndSessionsEndsAProcessThatKeepsChangingItsPID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as an account of its own (CI is root)")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl (Debian's perl-base) to run the process")
	}
	name, uid, gid, remove, err := testhost.SystemAccount("nodus-hop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	// Not t.TempDir: its parent is root's, 0700.
	dir, err := os.MkdirTemp("", "nodus-hop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "alive")
	// Each generation appends a byte, forks, and exits.
	hopper := exec.Command("perl", "-e", `while (1) { open(F, ">>", $ARGV[0]) and print F "x" and close F; select(undef, undef, undef, 0.002); exit if fork }`, marker)
	hopper.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := hopper.Start(); err != nil {
		t.Fatal(err)
	}
	go hopper.Wait() // the first generation exits at once
	t.Cleanup(func() { _ = SignalEveryProcessOf(uid, syscall.SIGKILL) })
	grows := func() bool {
		before, _ := os.Stat(marker)
		time.Sleep(300 * time.Millisecond)
		after, _ := os.Stat(marker)
		return before != nil && after != nil && after.Size() > before.Size()
	}
	for start := time.Now(); !grows(); {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the hopping process never ran")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := (Procs{Root: "/proc"}).EndSessions(ctx, name, 200*time.Millisecond); err != nil {
		t.Errorf("ending the sessions: %v", err)
	}
	if ctx.Err() != nil {
		t.Error("ending the sessions did not return")
	}
	if grows() {
		t.Error("the process that keeps changing its PID still runs after its sessions were ended")
	}
	// The thread that took the uid must be gone, never the main one, which
	// /proc shows: else the agent would count, and end, itself as the user.
	for range 50 {
		if err := SignalEveryProcessOf(uid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if pids, err := (Procs{Root: "/proc"}).PIDsOf(uid); err != nil || slices.Contains(pids, os.Getpid()) {
		t.Errorf("this process shows as one of uid %d: %v (%v)", uid, pids, err)
	}
	if err := SignalEveryProcessOf(0, syscall.SIGKILL); err == nil {
		t.Error("signalling every process as root was not refused")
	}
}
