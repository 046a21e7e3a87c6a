package cleaning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	// A /proc of no processes: the swapper runs on while the home is reset.
	c := &Cleaner{Procs: sessions.Procs{Root: t.TempDir()}, Paths: Paths{Skel: skel},
		Lookup: func(string) (*user.User, error) {
			return &user.User{Username: name, Uid: me, Gid: strconv.Itoa(gid), HomeDir: home}, nil
		}}
	for i := 0; i < 10 && !t.Failed(); i++ {
		if _, err := c.ResetAccount(context.Background(), name); err != nil {
			t.Logf("reset %d: %v", i, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(secret, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o777 != 0o600 || st.Uid != 0 {
			t.Errorf("after reset %d, root's file is mode %o, owner %d: the reset followed a tenant's symlink", i, st.Mode&0o777, st.Uid)
		}
	}
}

// TestASweepOfSharedDirectoriesFollowsNothingAnotherUserSwaps: a tenant's
// files can lie in another user's directories under /tmp (hard links to a
// file it left writable, or what it wrote there while it could), and that
// user, still logged in, swaps those directories for symlinks to a
// directory of root's while the sweep works. Root must delete the tenant's
// files only where it found them, never a file the symlink names.
func TestASweepOfSharedDirectoriesFollowsNothingAnotherUserSwaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the swapping process as an account of its own (CI is root)")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl (Debian's perl-base) to run the swapping process")
	}
	_, uid, gid, remove, err := testhost.SystemAccount("nodus-swap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	const tenant = 3999999 // the account being cleaned: only its uid matters
	// Not t.TempDir: its parent is root's, 0700, and the other user must
	// reach its directory; 1777 as /tmp is.
	shared, err := os.MkdirTemp("", "nodus-sweep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	roots := t.TempDir() // root's files, which the symlinks name
	var names []string
	for i := range 200 {
		n := fmt.Sprintf("f%03d", i)
		names = append(names, n)
		if err := os.WriteFile(filepath.Join(roots, n), []byte("root's\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	others := filepath.Join(shared, "d")
	var dirs []string
	for k := range 20 {
		dir := filepath.Join(others, fmt.Sprint("e", k))
		dirs = append(dirs, dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			path := filepath.Join(dir, n)
			if err := os.WriteFile(path, []byte("the tenant's\n"), 0o666); err != nil || os.Chown(path, tenant, tenant) != nil {
				t.Fatal("writing the tenant's file", err)
			}
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(others, uid, gid); err != nil {
		t.Fatal(err)
	}
	// The swapper: each directory moved away, a symlink to root's in its
	// place, then the directory back.
	swapper := exec.Command("perl", "-e", `my ($t, @d) = @ARGV; while (1) { for (@d) { rename($_, "$_.x") and symlink($t, $_) and unlink($_) and rename("$_.x", $_) } }`, roots)
	swapper.Args = append(swapper.Args, dirs...)
	swapper.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = swapper.Process.Kill()
			_ = swapper.Wait()
		}
	}
	t.Cleanup(stop)

	owns := func(u int) bool { return u == tenant }
	for i := 0; i < 5 && !t.Failed(); i++ {
		_, _ = removeOwned(shared, owns, true) // a swap seen may fail it
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(roots, n)); err != nil {
				t.Errorf("after sweep %d, root's %s: %v: the sweep followed another user's symlink", i, n, err)
				break
			}
		}
	}
	// Once nothing swaps, a sweep takes whatever of the tenant's is left,
	// wherever a swap left its directory.
	stop()
	for _, dir := range dirs {
		if _, err := os.Lstat(dir); err != nil {
			_ = os.Rename(dir+".x", dir)
		}
	}
	if _, err := removeOwned(shared, owns, true); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(shared, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Sys().(*syscall.Stat_t).Uid == tenant {
			t.Errorf("%s, the tenant's, is left", path)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestASweepOfSharedDirectoriesOutlastsDirectoriesOthersRemove: other
// programs make and remove directories of their own in /tmp all the time
// (every test suite, every build). One removed after the sweep went into
// it and before it read it is gone with all it held: the sweep must go on
// (a failed sweep fails the cleaning, and a node whose cleaning failed is
// put in maintenance for good), and still take the tenant's files.
func TestASweepOfSharedDirectoriesOutlastsDirectoriesOthersRemove(t *testing.T) {
	shared := t.TempDir()
	const tenant = 54321 // a uid no one here runs as: the sweep tells owners by number
	owns := func(uid int) bool { return uid == tenant }
	tenantsFile := filepath.Join(shared, "zz-the-tenant's")
	writeTenantsFile := func() {
		if os.Geteuid() != 0 {
			return // only root can give a file to another uid: the sweep alone is checked
		}
		if err := os.WriteFile(tenantsFile, []byte("left behind\n"), 0o600); err != nil || os.Chown(tenantsFile, tenant, tenant) != nil {
			t.Fatal("writing the tenant's file", err)
		}
	}
	// Another program's directories, each made and removed again at once:
	// the sweep meets one between the two often enough.
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		names := []string{"a-churn", "b-churn", "c-churn"}
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range names {
				_ = os.Mkdir(filepath.Join(shared, n), 0o755)
			}
			for _, n := range names {
				_ = os.Remove(filepath.Join(shared, n))
			}
		}
	}()
	defer func() { close(stop); <-churned }()
	for i := 0; i < 2000; i++ {
		writeTenantsFile()
		if _, err := removeOwned(shared, owns, true); err != nil {
			t.Fatalf("sweep %d: %v", i, err)
		}
		if _, err := os.Lstat(tenantsFile); os.Geteuid() == 0 && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("sweep %d left the tenant's file: %v", i, err)
		}
	}
}
