// Package sessions finds and ends a login user's processes on the host, by
// reading /proc: what an SSH login leaves running is processes of that user.
package sessions

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Procs reads process owners from a /proc tree (Root, "/proc" on a host).
type Procs struct {
	Root string
}

// UID returns the uid of login, or -1 when no such user exists.
func UID(login string) int {
	u, err := user.Lookup(login)
	if err != nil {
		return -1
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return -1
	}
	return uid
}

// PIDs returns the processes whose real uid is uid.
func (p Procs) PIDs(uid int) []int {
	return p.PIDsOf(uid)
}

// PIDsOf returns the processes whose real uid is one of uids, reading the
// /proc tree once however many uids there are.
func (p Procs) PIDsOf(uids ...int) []int {
	wanted := map[int]bool{}
	for _, uid := range uids {
		if uid >= 0 {
			wanted[uid] = true
		}
	}
	if len(wanted) == 0 {
		return nil
	}
	entries, err := os.ReadDir(p.Root)
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join(p.Root, e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		// A zombie runs nothing and cannot be signalled: its parent reaps it.
		if wanted[realUID(string(status))] && !zombie(string(status)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Count is the number of processes login runs.
func (p Procs) Count(login string) int { return len(p.PIDs(UID(login))) }

// End ends every process of login: SIGTERM, then SIGKILL for what is left
// after grace. It returns when none is left or ctx ends.
func (p Procs) End(ctx context.Context, login string, grace time.Duration) {
	p.EndUIDs(ctx, []int{UID(login)}, grace)
}

// settle is how long EndSessions watches for a session that was being set
// up while access was retired (authenticated just before, its processes
// appear just after the sweep).
const settle = 300 * time.Millisecond

// EndSessions ends every process of login like End, then keeps sweeping
// until a settle period passes with none (at most a few rounds): new logins
// are refused by then, so only a session already in flight can appear.
func (p Procs) EndSessions(ctx context.Context, login string, grace time.Duration) {
	uid := UID(login)
	for round := 0; round < 10; round++ {
		p.EndUIDs(ctx, []int{uid}, grace)
		select {
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
		if len(p.PIDsOf(uid)) == 0 {
			return
		}
	}
}

// EndUIDs ends every process of the users uids at once, like End. Unknown
// users (-1) and root are skipped: root's processes are never killed.
func (p Procs) EndUIDs(ctx context.Context, uids []int, grace time.Duration) {
	uids = slices.DeleteFunc(slices.Clone(uids), func(uid int) bool { return uid <= 0 })
	if len(uids) == 0 {
		return
	}
	signalAll(p.PIDsOf(uids...), syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for len(p.PIDsOf(uids...)) > 0 {
		if time.Now().After(deadline) {
			signalAll(p.PIDsOf(uids...), syscall.SIGKILL)
			deadline = time.Now().Add(grace)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
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

// realUID reads the real uid from /proc/PID/status ("Uid: real effective …").
func realUID(status string) int {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				if uid, err := strconv.Atoi(fields[0]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}
