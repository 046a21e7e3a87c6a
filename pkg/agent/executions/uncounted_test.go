package executions

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// TestBorrowersThatCannotBeListedAreNotGone: the host's processes cannot
// be read (/proc not mounted, no file descriptor left). The runner counted
// the borrower accounts' processes as none: the host showed no borrower
// left (a release, a drain or a handover went on while an execution's
// processes ran), and a slot whose last execution left processes behind
// went to the next execution, another project's.
func TestBorrowersThatCannotBeListedAreNotGone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to add the borrower accounts (CI is root)")
	}
	borrower, remove, err := testhost.BorrowerSlots("nodusu", 2)
	if err != nil {
		t.Skipf("no account can be added here: %v", err)
	}
	t.Cleanup(remove)
	r := New(Options{User: borrower, Slots: 2, Grace: 10 * time.Millisecond})
	unanswered := func(string) (*user.User, error) { return nil, errors.New("no answer from the directory") }
	for without, blind := range map[string]sessions.Procs{
		"/proc": {Root: filepath.Join(t.TempDir(), "not-mounted")},
		// The processes can be read, the accounts cannot (a directory
		// service that does not answer).
		"their accounts": {Root: t.TempDir(), Lookup: unanswered},
	} {
		r.procs = blind
		if n, err := r.Running(); err == nil {
			t.Errorf("the borrowers' processes were counted without %s: %d", without, n)
		}
		if !r.Active() {
			t.Errorf("a host shows no borrower without %s", without)
		}
		if got := r.freeAccount(); got != "" {
			t.Errorf("slot %q went to a new execution without %s", got, without)
		}
	}

	// Readable again, and nothing of the accounts runs.
	r.procs = sessions.Procs{Root: t.TempDir()}
	if n, err := r.Running(); err != nil || n != 0 {
		t.Errorf("the borrowers' processes on an empty host: %d, %v", n, err)
	}
	if r.Active() {
		t.Error("an empty host shows a borrower")
	}
	if got := r.freeAccount(); got != borrower+"-0" {
		t.Errorf("the free slot: %q", got)
	}
}
