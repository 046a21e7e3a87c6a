package cleaning

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ipcmkAs makes one System V IPC object (ipcmk's -M, -Q or -S) as uid and
// returns its id.
func ipcmkAs(t *testing.T, uid int, kind ...string) int {
	t.Helper()
	id := strconv.Itoa(uid)
	out, err := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "ipcmk"}, kind...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ipcmk %v as %d: %v: %s", kind, uid, err, out)
	}
	text := strings.TrimSpace(string(out))
	n, err := strconv.Atoi(text[strings.LastIndex(text, " ")+1:])
	if err != nil {
		t.Fatalf("ipcmk said %q", out)
	}
	return n
}

// listed says whether /proc/sysvipc/file lists the object id.
func listed(t *testing.T, file string, id int) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc/sysvipc", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == strconv.Itoa(id) {
			return true
		}
	}
	return false
}

// TestACleaningRemovesTheTenantsSystemVIPC: a shared memory segment, a
// message queue and a semaphore set outlive every process of their owner;
// the next tenant of the account, the same uid, could attach to them. The
// cleaning removes the tenant's, and nobody else's.
func TestACleaningRemovesTheTenantsSystemVIPC(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the tenant's objects are made as another uid (CI runs as root)")
	}
	for _, tool := range []string{"setpriv", "ipcmk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (util-linux) is not installed: %v", tool, err)
		}
	}
	s := newScratch(t)
	s.cleaner.Paths.SysVIPC = "/proc/sysvipc"
	tenant := map[string]int{"shm": ipcmkAs(t, s.uid, "-M", "4096"), "msg": ipcmkAs(t, s.uid, "-Q"), "sem": ipcmkAs(t, s.uid, "-S", "1")}
	other := ipcmkAs(t, s.uid+1, "-M", "4096")
	t.Cleanup(func() {
		// What a failed run left, so that it is not the next run's.
		_ = exec.Command("ipcrm", "-m", strconv.Itoa(other), "-m", strconv.Itoa(tenant["shm"]), "-q", strconv.Itoa(tenant["msg"]),
			"-s", strconv.Itoa(tenant["sem"])).Run()
	})
	for file, id := range tenant {
		if !listed(t, file, id) {
			t.Fatalf("the tenant's %s %d is not listed before the cleaning", file, id)
		}
	}

	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	for file, id := range tenant {
		if listed(t, file, id) {
			t.Errorf("the tenant's %s %d survived the cleaning", file, id)
		}
	}
	if !listed(t, "shm", other) {
		t.Error("another uid's segment was removed")
	}
	if !strings.Contains(strings.Join(r.Steps, "\n"), "removed 3 System V IPC objects of tenant") {
		t.Errorf("the steps do not count the objects: %v", r.Steps)
	}
}
