package sessions

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPIDsReadsEveryUID(t *testing.T) {
	root := t.TempDir()
	write := func(pid, status string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100", "Name:\tbash\nUid:\t1001\t1001\t1001\t1001\n")
	write("101", "Name:\tsleep\nUid:\t1001\t0\t0\t0\n")
	write("102", "Name:\tsshd\nUid:\t0\t0\t0\t0\n")
	write("self", "Uid:\t1001\t1001\t1001\t1001\n")
	if got, err := (Procs{Root: root}).PIDsOf(1001); err != nil || len(got) != 2 {
		t.Errorf("pids of 1001: %v, %v", got, err)
	}
	if got, err := (Procs{Root: root}).PIDsOf(-1); err != nil || got != nil {
		t.Errorf("an unknown user has no processes: %v, %v", got, err)
	}
	write("103", "Name:\tpython\nUid:\t1002\t1002\t1002\t1002\n")
	// An exited sshd session child nobody reaped yet runs nothing: it does not count.
	write("104", "Name:\tsshd\nState:\tZ (zombie)\nUid:\t1001\t1001\t1001\t1001\n")
	// In a user namespace of 1001's: the real uid a subordinate id, the
	// effective one 1001's, with 1001's rights on its files.
	write("105", "Name:\tsleep\nUid:\t100000\t1001\t1001\t1001\n")
	write("106", "Name:\tsleep\nUid:\t100000\t100000\t100000\t1001\n")
	// Listed, then gone before its status was read: not an error.
	if err := os.MkdirAll(filepath.Join(root, "107"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := (Procs{Root: root}).PIDsOf(1001, 1002, -1)
	if err != nil {
		t.Errorf("a process that exited while /proc was read: %v", err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{100, 101, 103, 105, 106}) {
		t.Errorf("pids of 1001 and 1002 in one pass: %v", got)
	}
}

func TestUnknownUser(t *testing.T) {
	if uid, err := (Procs{}).UIDOf("no-such-user-nodus"); uid != -1 || err != nil {
		t.Errorf("an unknown user: uid %d, %v", uid, err)
	}
}
