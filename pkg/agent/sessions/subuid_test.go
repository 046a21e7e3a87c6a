package sessions

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testhost"
)

// TestAProcessUnderASubordinateUIDIsTheUsers: a process every one of whose
// uids is one of the user's subordinate ones (a user namespace of its own:
// unshare --map-auto, a rootless container) is the user's.
func TestAProcessUnderASubordinateUIDIsTheUsers(t *testing.T) {
	root := t.TempDir()
	for pid, uids := range map[string]string{"100": "1001 1001 1001 1001", "101": "166537 166537 166537 166537", "102": "100001 100001 100001 100001"} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte("Name:\tsleep\nUid:\t"+uids+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	subuid := filepath.Join(root, "subuid")
	if err := os.WriteFile(subuid, []byte("someone:100000:65536\ntenant:165536:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	owns, err := Owner(subuid, "tenant", 1001)
	if err != nil {
		t.Fatal(err)
	}
	got, err := (Procs{Root: root}).PIDsOwned(owns)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{100, 101}) {
		t.Errorf("the tenant's processes: %v, want its own uid's and its subordinate uid's", got)
	}
}

// TestEndSessionsEndsAProcessUnderASubordinateUID: a login user's process
// running as one of its subordinate uids was neither counted (the drain
// evidence said no sessions) nor ended (at a revocation, or by the
// cleaning, which reported every process ended): it ran on into the next
// tenancy, with the host's network and GPUs.
func TestEndSessionsEndsAProcessUnderASubordinateUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process as another uid (CI is root)")
	}
	name, _, _, remove, err := testhost.SystemAccount("nodus-subuid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	const start, sub = 3_000_000, 3_000_007 // far above any account's uid
	subuid := filepath.Join(t.TempDir(), "subuid")
	if err := os.WriteFile(subuid, []byte(fmt.Sprintf("%s:%d:65536\n", name, start)), 0o644); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "1000")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: sub, Gid: sub}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })

	procs := Procs{Root: "/proc", SubUIDFile: subuid}
	if n, err := procs.Count(name); err != nil || n != 1 {
		t.Errorf("the user's processes: %d (%v), want its subordinate uid's one", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := procs.EndSessions(ctx, name, 200*time.Millisecond); err != nil {
		t.Errorf("ending the sessions: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the process under the user's subordinate uid survived the end of its sessions")
	}
	if n, err := procs.Count(name); err != nil || n != 0 {
		t.Errorf("the user's processes after the end of its sessions: %d (%v)", n, err)
	}
}
