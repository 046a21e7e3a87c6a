package cleaning

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// TestAHomeResetFollowsNothingATenantSwaps: a tenant's process that
// outlived its sessions (or one the reset races with) swaps each file the
// reset writes from the skeleton for a symlink to a root-owned file. Root
// must never change that file's mode or owner: the home is not the
// tenant's while it is reset.
func TestAHomeResetFollowsNothingATenantSwaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the swapping process as an account of its own (CI is root)")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl (Debian's perl-base) to run the swapping process")
	}
	name, uid, gid, remove, err := testhost.SystemAccount("nodus-swap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	// Not t.TempDir: its parent is root's, 0700, and the tenant must reach its home.
	root, err := os.MkdirTemp("", "nodus-swap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	skel, home := filepath.Join(root, "skel"), filepath.Join(root, "home")
	secret := filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(skel, 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 300 {
		n := fmt.Sprintf("f%03d", i)
		names = append(names, n)
		if err := os.WriteFile(filepath.Join(skel, n), []byte("skel\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(home, 0o700); err != nil || os.Chown(home, uid, gid) != nil {
		t.Fatal("making the home", err)
	}
	// The swapper: for each name, move the file away and leave a symlink.
	swapper := exec.Command("perl", "-e", `my ($h, $t, @n) = @ARGV; while (1) { for (@n) { rename("$h/$_", "$h/.x") and symlink($t, "$h/$_") } }`, home, secret)
	swapper.Args = append(swapper.Args, names...)
	swapper.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = swapper.Process.Kill(); _ = swapper.Wait() })

	me := strconv.Itoa(uid)
	c := &Cleaner{Procs: sessions.Procs{Root: filepath.Join(root, "no-proc")}, Paths: Paths{Skel: skel},
		Lookup: func(string) (*user.User, error) {
			return &user.User{Username: name, Uid: me, Gid: strconv.Itoa(gid), HomeDir: home}, nil
		}}
	for i := 0; i < 10 && !t.Failed(); i++ {
		_, _ = c.ResetAccount(context.Background(), name)
		var st syscall.Stat_t
		if err := syscall.Stat(secret, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o777 != 0o600 || st.Uid != 0 {
			t.Errorf("after reset %d, root's file is mode %o, owner %d: the reset followed a tenant's symlink", i, st.Mode&0o777, st.Uid)
		}
	}
}
