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
