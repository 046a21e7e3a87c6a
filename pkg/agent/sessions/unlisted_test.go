package sessions

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"testing"
	"time"
)

// TestAListingThatFailsIsNotNone: a /proc tree that cannot be read (not
// mounted, no file descriptor left, a process's status unreadable), or an
// account that cannot be looked up, was read as no processes at all. The agent then reported a releasing
// reservation's sessions ended, the cleaning reported every process of the
// tenant ended, and a borrower account with an execution still in it was
// handed to the next one.
func TestAListingThatFailsIsNotNone(t *testing.T) {
	const login = "nobody" // Debian's; only its count is read, no process of it is signalled
	uid, err := (Procs{}).UIDOf(login)
	if err != nil || uid <= 0 {
		t.Skipf("no %s account here (%v)", login, err)
	}
	gone := Procs{Root: filepath.Join(t.TempDir(), "not-mounted")}
	if pids, err := gone.PIDsOf(1001); err == nil {
		t.Errorf("a /proc that does not exist listed %v and no error", pids)
	}
	if n, err := gone.Count(login); err == nil {
		t.Errorf("the processes of %s were counted without /proc: %d", login, n)
	}

	// One process's status cannot be read (a directory here: EISDIR, as
	// EMFILE or EACCES would be): the listing is not whole.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "100"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "100", "status"), []byte("Name:\tsleep\nUid:\t1001\t1001\t1001\t1001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "101", "status"), 0o755); err != nil {
		t.Fatal(err)
	}
	pids, err := (Procs{Root: root}).PIDsOf(1001)
	if err == nil {
		t.Errorf("a process whose owner could not be read went unnoticed: %v", pids)
	}
	if len(pids) != 1 || pids[0] != 100 {
		t.Errorf("the processes read beside it: %v, want [100] (a signal still reaches them)", pids)
	}

	// Subordinate uids that cannot be read: what runs under them is not
	// counted, so the count is not a whole one either.
	unreadable := Procs{Root: t.TempDir(), SubUIDFile: t.TempDir()}
	if n, err := unreadable.Count(login); err == nil {
		t.Errorf("the processes of %s were counted without its subordinate uids: %d", login, n)
	}

	// The accounts cannot be read (a directory service that does not
	// answer): the user is not one without processes.
	unknown := Procs{Root: t.TempDir(), Lookup: func(string) (*user.User, error) { return nil, errors.New("no answer from the directory") }}
	if n, err := unknown.Count(login); err == nil {
		t.Errorf("the processes of %s were counted without its account: %d", login, n)
	}

	// Ending them cannot say they ended, and does not wait for ever on a
	// listing that does not come back.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, procs := range map[string]Procs{"without /proc": gone, "without subordinate uids": unreadable, "without the account": unknown} {
		if err := procs.EndSessions(ctx, login, 50*time.Millisecond); err == nil {
			t.Errorf("%s: the sessions of %s were ended and none shown left", name, login)
		}
		if err := procs.End(ctx, login, 50*time.Millisecond); err == nil {
			t.Errorf("%s: the processes of %s were ended and none shown left", name, login)
		}
	}
	if err := gone.EndUIDs(ctx, []int{uid}, 50*time.Millisecond); err == nil {
		t.Error("the processes of a uid were ended without /proc and none shown left")
	}
	if ctx.Err() != nil {
		t.Error("ending the processes waited on a listing that failed")
	}

	// A user that does not exist runs nothing, whatever /proc says.
	if n, err := (Procs{Root: t.TempDir()}).Count("no-such-user-nodus"); err != nil || n != 0 {
		t.Errorf("an unknown user's processes: %d, %v", n, err)
	}
}
