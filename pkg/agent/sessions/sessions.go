// Package sessions finds and ends a login user's processes on the host, by
// reading /proc: what an SSH login leaves running is processes of that user.
//
// Reading /proc is not enough to end them: a process that forks and exits
// at once is gone before its PID is read, and its child was not listed. So
// the processes of a user are also signalled through kill(-1) from a thread
// that runs as that user, which reaches all of them at once (the kernel
// refuses a fork that a fatal signal to its parent interrupts).
//
// A user's processes include those under its subordinate uids (subuid(5)):
// a user namespace of its own (unshare, a rootless container) runs as
// them, with every one of its four uids a subordinate one.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Procs reads process owners from a /proc tree (Root, "/proc" on a host).
type Procs struct {
	Root string
	// SubUIDFile lists the users' subordinate uids ("/etc/subuid" on a
	// host); "" counts a user's own uid only.
	SubUIDFile string
	// Lookup finds an account by name; nil is user.Lookup.
	Lookup func(name string) (*user.User, error)
}

// UIDOf is the uid of login: -1 and no error when no such user exists, an
// error when the accounts cannot be read (passwd unreadable, a directory
// service down): a user whose processes cannot be found is not one
// without processes.
func (p Procs) UIDOf(login string) (int, error) {
	lookup := p.Lookup
	if lookup == nil {
		lookup = user.Lookup
	}
	u, err := lookup(login)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("looking up the account %s: %w", login, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return -1, fmt.Errorf("the account %s has uid %q", login, u.Uid)
	}
	return uid, nil
}

// PIDsOf returns the processes of any of uids, reading the /proc tree once
// however many uids there are. Any of a process's four uids counts: one
// that runs with a user's rights under another real uid (a user namespace
// maps its real uid to a subordinate id, and keeps the effective one the
// user's) is that user's. An error says the listing is not whole (see
// PIDsOwned).
func (p Procs) PIDsOf(uids ...int) ([]int, error) {
	wanted := map[int]bool{}
	for _, uid := range uids {
		if uid >= 0 {
			wanted[uid] = true
		}
	}
	if len(wanted) == 0 {
		return nil, nil
	}
	return p.PIDsOwned(func(uid int) bool { return wanted[uid] })
}

// PIDsOwned returns the processes any of whose four uids owns says is the
// user's. An error says the /proc tree, or a process's status in it, could
// not be read: the processes it returns then are not all, and none listed
// is not none running (a release, a cleaning or a free account must not be
// told so).
func (p Procs) PIDsOwned(owns OwnedBy) ([]int, error) {
	return p.pids(func(status string) bool { return slices.ContainsFunc(uidsIn(status), owns) })
}

func (p Procs) pids(match func(status string) bool) ([]int, error) {
	entries, err := os.ReadDir(p.Root)
	if err != nil {
		return nil, fmt.Errorf("listing the host's processes: %w", err)
	}
	var pids []int
	var unread error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join(p.Root, e.Name(), "status"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // it exited after the listing
		}
		if err != nil {
			// The others are still listed: a signal reaches them.
			if unread == nil {
				unread = fmt.Errorf("reading the owner of process %d: %w", pid, err)
			}
			continue
		}
		// A zombie runs nothing and cannot be signalled: its parent reaps it.
		if match(string(status)) && !zombie(string(status)) {
			pids = append(pids, pid)
		}
	}
	return pids, unread
}

// ownerOf is login's uid (-1 for none) and what it owns: its uid and its
// subordinate ones. A subordinate uid file it cannot read gives its own
// uid only, with the error: what that misses must not be counted as none.
func (p Procs) ownerOf(login string) (int, OwnedBy, error) {
	uid, err := p.UIDOf(login)
	if uid <= 0 {
		return uid, func(int) bool { return false }, err
	}
	owns, err := Owner(p.SubUIDFile, login, uid)
	if err != nil {
		return uid, func(u int) bool { return u == uid }, fmt.Errorf("reading the subordinate uids of %s: %w", login, err)
	}
	return uid, owns, nil
}

// Count is the number of processes login runs, under its own uid or a
// subordinate one; 0 for a user that does not exist. An error says it
// could not be counted (the account, its processes or its subordinate uids
// could not be read): the count is then at least what it returns.
func (p Procs) Count(login string) (int, error) {
	uid, owns, ownerErr := p.ownerOf(login)
	if uid <= 0 {
		return 0, ownerErr // root's are never a login user's sessions
	}
	pids, err := p.PIDsOwned(owns)
	return len(pids), errors.Join(ownerErr, err)
}

// End ends every process of login: SIGTERM, then SIGKILL for what is left
// after grace. It returns nil once a listing shows none left, else the
// reason it cannot tell (see EndOwned).
func (p Procs) End(ctx context.Context, login string, grace time.Duration) error {
	uid, owns, ownerErr := p.ownerOf(login)
	return errors.Join(ownerErr, p.EndOwned(ctx, uid, owns, grace))
}

// settle is how long EndSessions watches for a session that was being set
// up while access was retired (authenticated just before, its processes
// appear just after the sweep).
const settle = 300 * time.Millisecond

// EndSessions ends every process of login like End, then keeps sweeping
// until a settle period passes with none (at most a few rounds): new logins
// are refused by then, so only a session already in flight can appear.
func (p Procs) EndSessions(ctx context.Context, login string, grace time.Duration) error {
	uid, owns, ownerErr := p.ownerOf(login)
	return errors.Join(ownerErr, p.EndSessionsOwned(ctx, uid, owns, grace))
}

// EndSessionsOwned is EndSessions of the user uid, whose processes owns
// tells (its own uid and subordinate ones). It returns nil once a settle
// period passed with none listed, else why it cannot say they ended.
func (p Procs) EndSessionsOwned(ctx context.Context, uid int, owns OwnedBy, grace time.Duration) error {
	const rounds = 10
	var left []int
	for range rounds {
		if err := p.EndOwned(ctx, uid, owns, grace); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settle):
		}
		var err error
		if left, err = p.PIDsOwned(owns); err != nil {
			return err
		} else if len(left) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%d processes still start after %d rounds of ending them", len(left), rounds)
}

// EndUIDs ends every process of the users uids at once, like End (their
// own uids only). Unknown users (-1) and root are skipped: root's
// processes are never killed.
func (p Procs) EndUIDs(ctx context.Context, uids []int, grace time.Duration) error {
	uids = slices.DeleteFunc(slices.Clone(uids), func(uid int) bool { return uid <= 0 })
	if len(uids) == 0 {
		return nil
	}
	return p.end(ctx, uids, func(u int) bool { return slices.Contains(uids, u) }, grace)
}

// EndOwned ends every process of the user uid that owns tells (its own
// uid, its subordinate ones), like End. Root's are never killed. It
// returns nil once a listing after SIGKILL shows none left; ctx's error,
// with how many were left, when ctx ends first; the listing's error when
// the processes cannot be listed: SIGKILL went to all of uid's at once
// all the same, and a caller tries again later rather than wait here on a
// listing that may never come back.
func (p Procs) EndOwned(ctx context.Context, uid int, owns OwnedBy, grace time.Duration) error {
	if uid <= 0 {
		return nil
	}
	return p.end(ctx, []int{uid}, func(u int) bool { return u > 0 && owns(u) }, grace)
}

func (p Procs) end(ctx context.Context, uids []int, owns OwnedBy, grace time.Duration) error {
	p.signal(uids, owns, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	// A listing that fails tells nothing: the processes get their grace.
	for time.Now().Before(deadline) {
		if left, err := p.PIDsOwned(owns); err == nil && len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	// SIGKILL even when /proc shows none left: a process that changes its
	// PID faster than /proc is read shows in no listing.
	for {
		p.signal(uids, owns, syscall.SIGKILL)
		left, err := p.PIDsOwned(owns)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes left after SIGKILL: %w", len(left), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signal sends sig to the processes owns tells: to each listed in /proc,
// and, on the host's own /proc, to all of each of uids' at once through
// kill(-1), and of each owned uid a listed process runs as (a subordinate
// one: a process that forks and exits under it is caught too).
func (p Procs) signal(uids []int, owns OwnedBy, sig syscall.Signal) {
	seen := map[int]bool{}
	// A listing that fails still lists what it read; kill(-1) below does
	// not need one.
	listed, _ := p.PIDsOwned(owns)
	for _, pid := range listed {
		_ = syscall.Kill(pid, sig)
		if status, err := os.ReadFile(filepath.Join(p.Root, strconv.Itoa(pid), "status")); err == nil {
			for _, u := range uidsIn(string(status)) {
				if owns(u) {
					seen[u] = true
				}
			}
		}
	}
	if filepath.Clean(p.Root) != "/proc" {
		return // a tree of a test's: its uids are not the host's processes
	}
	for _, uid := range uids {
		seen[uid] = true
	}
	for uid := range seen {
		_ = SignalEveryProcessOf(uid, sig)
	}
}

// SignalEveryProcessOf sends sig to every process whose real or saved uid
// is uid, at once: kill(-1) from a thread that takes uid as its real,
// effective and saved uid (and so loses root's capabilities), which the
// kernel lets signal exactly those. Only that thread changes: the raw
// system call is per thread, unlike syscall.Setresuid, and the thread ends
// with its goroutine, never unlocked. It refuses root and the caller's own
// uid, whose processes are not a user's to end.
func SignalEveryProcessOf(uid int, sig syscall.Signal) error {
	if uid <= 0 || uid == os.Geteuid() || uid == os.Getuid() {
		return fmt.Errorf("not signalling every process of uid %d: root's or this process's own", uid)
	}
	done := make(chan error, 1)
	go signalAs(uid, sig, done)
	return <-done
}

func signalAs(uid int, sig syscall.Signal, done chan<- error) {
	runtime.LockOSThread()
	if syscall.Gettid() == os.Getpid() {
		// The main thread does not end with its goroutine: it would keep
		// the uid, and /proc, which shows the main thread's, would list
		// this process as the user's. Hold it, so that the work goes to
		// another thread.
		other := make(chan error, 1)
		go signalAs(uid, sig, other)
		err := <-other
		runtime.UnlockOSThread()
		done <- err
		return
	}
	// Never unlocked: the thread exits with this goroutine, and the uid with it.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
		done <- fmt.Errorf("setresuid(%d): %w", uid, errno)
		return
	}
	everyProcess := -1
	if _, _, errno := syscall.RawSyscall(syscall.SYS_KILL, uintptr(everyProcess), uintptr(sig), 0); errno != 0 && errno != syscall.ESRCH {
		done <- fmt.Errorf("kill(-1) as uid %d: %w", uid, errno) // ESRCH: it had none
		return
	}
	done <- nil
}

// zombie says whether /proc/PID/status is of a process that exited and
// waits to be reaped ("State: Z (zombie)").
func zombie(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.HasPrefix(strings.TrimSpace(rest), "Z")
		}
	}
	return false
}

// uidsIn reads the uids of /proc/PID/status ("Uid: real effective saved
// file-system").
func uidsIn(status string) []int {
	var uids []int
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			for _, field := range strings.Fields(rest) {
				if uid, err := strconv.Atoi(field); err == nil {
					uids = append(uids, uid)
				}
			}
		}
	}
	return uids
}
