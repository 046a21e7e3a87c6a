package executions

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodus-dev/nodus/pkg/agent/sandbox"
)

// TestASandboxedExecutionsFilesAreOutOfTheOwnersReach: a sandboxed
// execution mounts its work directory nosuid, but the directory is also on
// the host, where the owner's login user could run what the execution left
// there: a copy of a shell made setuid to the borrower account (the account
// every borrower's execution runs as) would have given the owner a process
// of that account outside any sandbox, next to other projects' executions.
// The work root is closed to everyone but root while executions are
// sandboxed: runc reaches the directory as root, the execution through its
// mount.
func TestASandboxedExecutionsFilesAreOutOfTheOwnersReach(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runc sandboxes need root (CI runs as root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skipf("setpriv (util-linux) is not installed: %v", err)
	}
	rt, err := sandbox.Find(t.TempDir())
	if err != nil {
		t.Skip(err.Error())
	}
	rt.CgroupParent = "/nodus-executions-workroot-test"
	const borrower, owner = 65534, 4243
	// The host's /var/lib is open to every account: so are the directories above the root here.
	varLib := t.TempDir()
	for _, dir := range []string{filepath.Dir(varLib), varLib} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{opts: Options{WorkRoot: filepath.Join(varLib, "nodus-executions"), Sandbox: rt}}
	// One an account of the host made open and its own before nodusd came.
	if err := os.Mkdir(r.opts.WorkRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.opts.WorkRoot, owner, owner); err != nil {
		t.Fatal(err)
	}
	// The control: the owner's account runs what is in reach, so a refusal below is the work root's.
	ownerRuns := func(path string) ([]byte, error) {
		// Through a shell of the owner's account: setpriv itself may reach
		// a path before it drops root's rights.
		return exec.Command("setpriv", "--reuid", strconv.Itoa(owner), "--regid", strconv.Itoa(owner), "--clear-groups",
			"/bin/sh", "-c", `"$0" -u`, path).CombinedOutput()
	}
	reachable := filepath.Join(varLib, "id")
	if err := exec.Command("cp", "/usr/bin/id", reachable).Run(); err != nil {
		t.Fatal(err)
	}
	if got, err := ownerRuns(reachable); err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(owner) {
		t.Fatalf("the owner's account cannot run a program beside the work root: %v %q", err, got)
	}
	dir := filepath.Join(r.opts.WorkRoot, "an-execution")
	if err := r.workDir(dir, &syscall.Credential{Uid: borrower, Gid: borrower}); err != nil {
		t.Fatal(err)
	}
	script := "cp /usr/bin/id /work/x && chmod 4755 /work/x && chmod 755 /work && touch /work/ready && sleep 60"
	var out bytes.Buffer
	box, err := rt.Start(sandbox.Spec{ID: fmt.Sprintf("workroot%d", time.Now().UnixNano()), Args: []string{"/bin/sh", "-c", script},
		Env: []string{"PATH=/usr/bin:/bin"}, UID: borrower, GID: borrower, HostWorkDir: dir}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = box.Signal(syscall.SIGKILL)
		_ = box.Wait()
		_ = box.Close()
	})
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, "ready"))
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the execution did not get to plant its file through its work directory: %v (its output: %q)", err, out.String())
	}

	got, err := ownerRuns(filepath.Join(dir, "x"))
	if err == nil || strings.TrimSpace(string(got)) == strconv.Itoa(borrower) {
		t.Fatalf("another account of the host ran the execution's setuid file as the borrower account: %v %q", err, got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(r.opts.WorkRoot, &st); err != nil {
		t.Error(err)
	} else if st.Mode&0o7777 != 0o700 || st.Uid != 0 {
		t.Errorf("the work root of sandboxed executions is %o, uid %d; want 0700, root's", st.Mode&0o7777, st.Uid)
	}
}

// The executions' directory is swept and written by root, so whoever can
// change what its path names could have root remove or hand over what it
// points to instead: a symbolic link there, or anywhere on its way (a
// directory another account can write could get one at any time). Such a
// directory is refused, and nothing is removed through it.
func TestAnExecutionsDirectoryOthersCouldRedirectIsRefused(t *testing.T) {
	cases := map[string]struct {
		prepare func(t *testing.T, base string) (workRoot string)
		why     string // in the refusal
	}{
		"a link": {func(t *testing.T, base string) string {
			link := filepath.Join(base, "nodus-executions")
			if err := os.Symlink(victim(t, base), link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is a symbolic link"},
		"a link on the way": {func(t *testing.T, base string) string {
			link := filepath.Join(base, "lib")
			if err := os.Symlink(filepath.Dir(victim(t, base)), link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "victim")
		}, "goes through the symbolic link"},
		"under a directory others can write": {func(t *testing.T, base string) string {
			open := openDir(t, base, 0o777)
			workRoot := filepath.Join(open, "victim")
			if err := os.Rename(victim(t, base), workRoot); err != nil {
				t.Fatal(err)
			}
			return workRoot
		}, "accounts other than its owner can write"},
		// Sticky, the directory's own entry would be safe once made; one
		// on the way to it is not: another account could make it a link
		// first, and the agent make directories where it leads.
		"to be made under a sticky directory, a directory on its way": {func(t *testing.T, base string) string {
			victim(t, base)
			return filepath.Join(openDir(t, base, 0o777|os.ModeSticky), "not-yet", "victim")
		}, "make it first"},
		"under a directory another account owns": {func(t *testing.T, base string) string {
			if os.Geteuid() != 0 {
				t.Skip("giving a directory to another account needs root (CI runs as root)")
			}
			theirs := filepath.Join(base, "theirs")
			if err := os.Mkdir(theirs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(theirs, 4243, 4243); err != nil {
				t.Fatal(err)
			}
			workRoot := filepath.Join(theirs, "victim")
			if err := os.Rename(victim(t, base), workRoot); err != nil {
				t.Fatal(err)
			}
			return workRoot
		}, "which uid 4243 owns"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			workRoot := c.prepare(t, base)
			// What the directory holds, or where a link on its way leads.
			kept := filepath.Join(base, "real", "victim", "kept")
			if p, err := filepath.EvalSymlinks(filepath.Join(workRoot, "kept")); err == nil {
				kept = p
			}
			r := &Runner{opts: Options{WorkRoot: workRoot, User: "nodus-test-no-such-account"}}
			r.Sweep(context.Background())
			if _, err := os.Stat(kept); err != nil {
				t.Errorf("the sweep removed what a redirected executions' directory held: %v", err)
			}
			err := r.workDir(filepath.Join(workRoot, "an-execution"), nil)
			if err == nil {
				t.Fatal("an execution's work directory was made through a directory others could redirect")
			}
			if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "--executions-dir") {
				t.Errorf("the refusal does not say %q, and which setting: %v", c.why, err)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(kept), "an-execution")); err == nil {
				t.Error("the work directory was made where the link pointed")
			}
		})
	}
	if err := (&Runner{opts: Options{WorkRoot: "/"}}).workRoot(); err == nil {
		t.Error("/ taken for the executions' directory: the sweep would empty it")
	}
}

// openDir is a directory of base's with mode (group and others may write).
func openDir(t *testing.T, base string, mode os.FileMode) string {
	dir := filepath.Join(base, "open")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// victim is a directory of base's holding a file, "kept", that a sweep
// through a redirected executions' directory would remove.
func victim(t *testing.T, base string) string {
	dir := filepath.Join(base, "real", "victim")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The control: an executions' directory in a sticky directory open to all
// (as /tmp and /var/tmp are, where others cannot rename what is not
// theirs) is the agent's own, and swept.
func TestAnExecutionsDirectoryInAStickyDirectoryIsSwept(t *testing.T) {
	sticky := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	workRoot := filepath.Join(sticky, "nodus-executions")
	left := filepath.Join(workRoot, "left-by-an-execution")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	// Made by an account before the agent came, where root could take it.
	if os.Geteuid() == 0 {
		for _, dir := range []string{workRoot, left} {
			if err := os.Chown(dir, 4243, 4243); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := &Runner{opts: Options{WorkRoot: workRoot, User: "nodus-test-no-such-account"}}
	r.Sweep(context.Background())
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the sweep left what an execution left: %v", err)
	}
	if err := r.workDir(filepath.Join(workRoot, "an-execution"), nil); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(workRoot, &st); err != nil {
		t.Fatal(err)
	}
	if want := os.Geteuid(); int(st.Uid) != want || st.Mode&0o7777 != 0o711 {
		t.Errorf("the executions' directory is uid %d's, mode %o; want uid %d's, 0711 (no sandbox)", st.Uid, st.Mode&0o7777, want)
	}
}
