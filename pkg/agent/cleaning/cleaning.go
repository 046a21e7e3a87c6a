// Package cleaning resets a login account between tenants: it ends the
// account's processes, removes what would outlive the tenant or let it back
// in (crontab, at jobs, lingering user services, System V IPC objects, keys
// in the kernel's keyrings, the runtime directory's contents, files left in shared temporary
// directories, its journal files and last login, the whole home with ~/.ssh), recreates the home
// from /etc/skel, and runs the operator's own cleaning command — without
// which it calls no host clean after a login user that could become root.
// What it did is the evidence nodusd reports; the node is available again
// only on it.
package cleaning

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// Paths are where a host keeps what a login account leaves behind. The
// defaults are Debian's and Red Hat's; tests point them at a scratch tree.
type Paths struct {
	Skel string
	// CronSpools hold one crontab file per user, named after the user.
	CronSpools []string
	// AtSpools hold at jobs, one file per job, owned by its user.
	AtSpools []string
	// LingerDir marks users whose systemd services run without a login.
	LingerDir string
	// TempDirs are shared directories where a user's top-level entries are removed.
	TempDirs []string
	// MailSpools hold one mailbox per user, named after the user.
	MailSpools []string
	// CrashDirs hold crash reports (apport's, owned by the user whose
	// program crashed) and core dumps (systemd-coredump's, root's, which
	// name the uid and let it read them): the user's are removed, the
	// memory of its crashed processes.
	CrashDirs []string
	// JournalDirs hold journald's journals, a directory per machine and
	// journald namespace (MACHINE-ID[.NAMESPACE]; the top level where the
	// machine has no ID); in each, what a non-system uid logs is in files
	// of its own (user-UID.journal and their archives), which that uid
	// reads: the account's are removed.
	JournalDirs []string
	// JournaldRuntime is where each running journald listens
	// (journal[.NAMESPACE]/io.systemd.journal): each is asked to write out
	// what it holds first, and one whose active file went to start new
	// ones. Empty: none is asked.
	JournaldRuntime string
	// LastLog is shadow's lastlog file: each account's last terminal login
	// and where it came from, which sshd shows the account at its next one
	// and any user of the host reads. Where it exists, lastlog(8) clears the
	// account's record (in the file built into it: /var/log/lastlog, where
	// this is a host's). Empty: not looked at.
	LastLog string
	// RuntimeDirs hold a directory per logged-in uid, named after the uid
	// (systemd-logind's XDG_RUNTIME_DIR): its contents are removed.
	RuntimeDirs string
	// SysVIPC lists the System V IPC objects (/proc/sysvipc); the user's
	// are removed. Empty: none are.
	SysVIPC string
	// KernelKeyrings: the keys in the keyrings the kernel keeps for the
	// user's uid past its processes (user, user session, persistent) are
	// removed. False: they are not looked at.
	KernelKeyrings bool
	// SubUIDFile lists the subordinate uids of accounts (subuid(5)): what
	// they own is the account's. Empty: not looked at.
	SubUIDFile string
	// GroupFile, Sudoers and SudoersDir tell whether a login user can
	// become root (RootAccess). Empty: not looked at.
	GroupFile, Sudoers, SudoersDir string
}

// DefaultPaths are a host's real ones.
func DefaultPaths() Paths {
	return Paths{
		Skel:            "/etc/skel",
		CronSpools:      []string{"/var/spool/cron/crontabs", "/var/spool/cron"},
		AtSpools:        []string{"/var/spool/cron/atjobs", "/var/spool/at"},
		LingerDir:       "/var/lib/systemd/linger",
		TempDirs:        []string{"/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock"},
		MailSpools:      []string{"/var/mail", "/var/spool/mail"},
		CrashDirs:       []string{"/var/crash", "/var/lib/systemd/coredump"},
		JournalDirs:     []string{"/var/log/journal", "/run/log/journal"},
		JournaldRuntime: "/run/systemd",
		LastLog:         "/var/log/lastlog",
		RuntimeDirs:     "/run/user",
		SysVIPC:         "/proc/sysvipc",
		KernelKeyrings:  true,
		SubUIDFile:      "/etc/subuid",
		GroupFile:       "/etc/group",
		Sudoers:         "/etc/sudoers",
		SudoersDir:      "/etc/sudoers.d",
	}
}

// MaxOutput bounds the command output kept as evidence: what the server records.
const MaxOutput = validation.MaxCleaningOutput

// Cleaner resets accounts.
type Cleaner struct {
	Procs sessions.Procs
	// Grace is how long processes get between SIGTERM and SIGKILL.
	Grace time.Duration
	Paths Paths
	// Command, when set, is the operator's cleaning command, run by /bin/sh -c
	// after the accounts are reset, with NODUS_CLEAN_USERS (space-separated)
	// and NODUS_CLEAN_REQUEST in its environment.
	Command string
	// CommandTimeout bounds Command; past it the command's process group is killed.
	CommandTimeout time.Duration
	// Lookup finds an account; user.Lookup by default.
	Lookup func(name string) (*user.User, error)
	// Groups lists the groups the system's name service knows of an
	// account (LDAP, SSSD, beside the group file); nameServiceGroups by default.
	Groups func(u *user.User) ([]group, error)
}

// Report is what a cleaning did.
type Report struct {
	Steps           []string
	Err             error
	CommandExitCode *int32
	CommandOutput   string
}

// Clean resets every account in users, then runs the operator's command. It
// stops at the first failure: a node whose cleaning failed is never handed on.
// Without a command it fails for a login user that can become root, or
// could when it was granted (granted, by user: the tenant could have taken
// the rights away since, or made its account one the agent does not reset,
// which granted names though users does not): such a tenant could have
// changed anything on the host, nodusd included, and resetting its account
// proves nothing.
func (c *Cleaner) Clean(ctx context.Context, request int64, users []string, granted map[string][]string) Report {
	var r Report
	for _, name := range users {
		steps, err := c.ResetAccount(ctx, name)
		r.Steps = append(r.Steps, steps...)
		if err != nil {
			r.Err = fmt.Errorf("resetting %s: %w", name, err)
			return r
		}
	}
	checked := slices.Clone(users)
	for _, name := range slices.Sorted(maps.Keys(granted)) {
		if !slices.Contains(checked, name) {
			checked = append(checked, name)
		}
	}
	for _, name := range checked {
		ways, err := c.RootAccess(name)
		switch {
		case err != nil && c.Command == "":
			r.Err = fmt.Errorf("looking for ways %s can become root: %w", name, err)
			return r
		case err != nil:
			// Whatever they are, the command restores the host.
			r.Steps = append(r.Steps, fmt.Sprintf("could not tell whether login user %s can become root (%v): the clean command restores the host", name, err))
			continue
		}
		for _, w := range granted[name] {
			if !slices.Contains(ways, w) {
				ways = append(ways, w+" (when it was granted)")
			}
		}
		if len(ways) == 0 {
			continue
		}
		if c.Command == "" {
			r.Err = fmt.Errorf("login user %s can become root (%s): resetting its account cannot make the host clean; set a clean command that restores the host (--clean-command, a re-image), or take those rights from the login user",
				name, strings.Join(ways, "; "))
			return r
		}
		r.Steps = append(r.Steps, fmt.Sprintf("login user %s can become root (%s): the clean command restores the host", name, strings.Join(ways, "; ")))
	}
	if c.Command == "" {
		return r
	}
	// Every account the host may hold a tenant's leftovers of, the
	// refused ones that could become root with them.
	code, output, err := c.runCommand(ctx, request, checked)
	r.CommandExitCode, r.CommandOutput = &code, output
	switch {
	case err != nil:
		r.Err = err
	case code != 0:
		r.Err = fmt.Errorf("the clean command exited %d", code)
	default:
		r.Steps = append(r.Steps, "clean command exited 0")
	}
	return r
}

// account looks name up: nil when the host has no such account.
func (c *Cleaner) account(name string) (u *user.User, uid, gid int, err error) {
	lookup := c.Lookup
	if lookup == nil {
		lookup = user.Lookup
	}
	u, err = lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, 0, 0, fmt.Errorf("account %s has uid %q, gid %q", name, u.Uid, u.Gid)
	}
	return u, uid, gid, nil
}

// RootAccess lists the ways account name can become root; none for an
// account that does not exist.
func (c *Cleaner) RootAccess(name string) ([]string, error) {
	u, uid, gid, err := c.account(name)
	if u == nil || err != nil {
		return nil, err
	}
	groups, err := groupsOf(c.Paths.GroupFile, name, gid)
	if err != nil {
		return nil, err
	}
	// And the groups the system's name service knows (LDAP, SSSD), which
	// the group file does not list. A list that cannot be read is no
	// list of none: a group of them may be docker's or sudo's.
	listed := c.Groups
	if listed == nil {
		listed = nameServiceGroups
	}
	known, err := listed(u)
	if err != nil {
		return nil, fmt.Errorf("listing the groups of %s: %w", name, err)
	}
	for _, g := range known {
		if !slices.ContainsFunc(groups, func(in group) bool { return in.gid == g.gid }) {
			groups = append(groups, g)
		}
	}
	return c.Paths.rootWays(name, uid, groups)
}

// nameServiceGroups lists u's groups as the system's name service knows
// them. A group id without a name is kept by its id (gid 0 counts by id).
func nameServiceGroups(u *user.User) ([]group, error) {
	ids, err := u.GroupIds()
	if err != nil {
		return nil, err
	}
	var groups []group
	for _, id := range ids {
		n, err := strconv.Atoi(id)
		if err != nil {
			return nil, fmt.Errorf("group id %q", id)
		}
		g, err := user.LookupGroupId(id)
		switch {
		case errors.As(err, new(user.UnknownGroupIdError)):
			groups = append(groups, group{name: id, gid: n})
		case err != nil:
			return nil, err
		default:
			groups = append(groups, group{name: g.Name, gid: n})
		}
	}
	return groups, nil
}

// ResetAccount ends name's processes and removes and recreates what it
// owns. An account that does not exist has nothing to reset. It refuses
// accounts it must never touch: uid 0 and homes that are not a directory of
// their own.
func (c *Cleaner) ResetAccount(ctx context.Context, name string) ([]string, error) {
	u, uid, gid, err := c.account(name)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return []string{"no account " + name + " on this host: nothing to reset"}, nil
	}
	if uid == 0 {
		return nil, fmt.Errorf("account %s is uid 0: a login user must be unprivileged", name)
	}
	home := filepath.Clean(u.HomeDir)
	if !filepath.IsAbs(home) || home == "/" || strings.Count(home, "/") < 2 {
		return nil, fmt.Errorf("account %s has home %q, which is not a directory of its own", name, u.HomeDir)
	}

	owns, err := sessions.Owner(c.Paths.SubUIDFile, name, uid)
	if err != nil {
		return nil, fmt.Errorf("reading the subordinate uids of %s: %w", name, err)
	}
	var steps []string
	// Bounded: a process that survives SIGKILL (stuck in the kernel) fails
	// the cleaning instead of holding it for ever.
	endCtx, cancel := context.WithTimeout(ctx, 2*(2*c.Grace+10*time.Second))
	defer cancel()
	// Its processes under its subordinate uids too (a user namespace of its
	// own): the next tenant of the account gets those uids again. What
	// this first sweep cannot show ended, the second one must.
	_ = c.Procs.EndSessionsOwned(endCtx, uid, owns, c.Grace)

	scheduled, err := c.unschedule(name, owns)
	steps = append(steps, scheduled...)
	if err != nil {
		return steps, err
	}
	// Again, now that nothing can start a process of the account: a cron
	// or at job, or a user service, that started after the first sweep.
	err = c.Procs.EndSessionsOwned(endCtx, uid, owns, c.Grace)
	cancel()
	if err != nil {
		return steps, fmt.Errorf("the processes of %s cannot be shown ended: %w", name, err)
	}
	running, err := c.Procs.PIDsOwned(owns)
	if err != nil {
		return steps, fmt.Errorf("the processes of %s cannot be shown ended: %w", name, err)
	}
	if len(running) > 0 {
		return steps, fmt.Errorf("%d processes of %s are still running after SIGKILL", len(running), name)
	}
	steps = append(steps, "ended every process of "+name)
	if c.Paths.SysVIPC != "" {
		n, err := removeIPC(c.Paths.SysVIPC, owns)
		if err != nil {
			return steps, fmt.Errorf("removing System V IPC objects: %w", err)
		}
		steps = append(steps, fmt.Sprintf("removed %d System V IPC objects of %s", n, name))
	}
	if c.Paths.KernelKeyrings {
		n, err := removeKeys(uid)
		if err != nil {
			return steps, fmt.Errorf("removing keys from the kernel keyrings: %w", err)
		}
		// And the keys of its subordinate uids (a rootless container's),
		// which the next tenant of the account gets too.
		keyed, err := keyedUIDs()
		if err != nil {
			return steps, fmt.Errorf("listing the uids that own keys: %w", err)
		}
		for _, sub := range keyed {
			if sub == uid || !owns(sub) {
				continue
			}
			m, err := removeKeys(sub)
			n += m
			if err != nil {
				return steps, fmt.Errorf("removing keys of subordinate uid %d from the kernel keyrings: %w", sub, err)
			}
		}
		steps = append(steps, fmt.Sprintf("removed %d keys from the kernel keyrings of %s", n, name))
	}
	if c.Paths.RuntimeDirs != "" {
		n, err := emptyRuntimeDir(filepath.Join(c.Paths.RuntimeDirs, strconv.Itoa(uid)), uid)
		if err != nil {
			return steps, fmt.Errorf("emptying the runtime directory: %w", err)
		}
		steps = append(steps, fmt.Sprintf("removed %d entries of %s's runtime directory", n, name))
	}
	left := 0
	for _, dir := range c.Paths.TempDirs {
		n, err := removeOwned(dir, owns, true)
		if err != nil {
			return steps, fmt.Errorf("removing files in %s: %w", dir, err)
		}
		left += n
	}
	steps = append(steps, fmt.Sprintf("removed %d entries of %s in shared temporary directories", left, name))
	for _, dir := range c.Paths.MailSpools {
		if err := removeIfExists(filepath.Join(dir, name)); err != nil {
			return steps, fmt.Errorf("removing the mailbox: %w", err)
		}
	}
	if len(c.Paths.MailSpools) > 0 {
		steps = append(steps, "removed the mailbox of "+name)
	}
	crashes := 0
	for _, dir := range c.Paths.CrashDirs {
		n, err := removeCrashes(dir, owns, uid)
		if err != nil {
			return steps, fmt.Errorf("removing crash reports in %s: %w", dir, err)
		}
		crashes += n
	}
	if len(c.Paths.CrashDirs) > 0 {
		steps = append(steps, fmt.Sprintf("removed %d crash reports and core dumps of %s", crashes, name))
	}
	if len(c.Paths.JournalDirs) > 0 {
		journals, err := c.removeJournals(ctx, name, owns)
		steps = append(steps, journals...)
		if err != nil {
			return steps, fmt.Errorf("removing journal files: %w", err)
		}
	}
	if c.Paths.LastLog != "" {
		steps = append(steps, clearLastLog(ctx, c.Paths.LastLog, name))
	}

	if err := resetHome(home, c.Paths.Skel, uid, gid); err != nil {
		return steps, fmt.Errorf("resetting %s: %w", home, err)
	}
	steps = append(steps, fmt.Sprintf("reset %s (with ~/.ssh) from %s", home, c.Paths.Skel))
	return steps, nil
}

// Unschedule removes what would start a process of account name later:
// its crontab, its at jobs (its subordinate uids' too) and its lingering.
// Run when the account's access ends, before its sessions are ended: a
// cron job would otherwise run the tenant's code again every minute until
// the cleaning, which the server may ask for much later. A missing
// account has nothing scheduled.
func (c *Cleaner) Unschedule(name string) ([]string, error) {
	u, uid, _, err := c.account(name)
	if u == nil || err != nil {
		return nil, err
	}
	if uid == 0 {
		return nil, fmt.Errorf("account %s is uid 0: a login user must be unprivileged", name)
	}
	owns, err := sessions.Owner(c.Paths.SubUIDFile, name, uid)
	if err != nil {
		return nil, fmt.Errorf("reading the subordinate uids of %s: %w", name, err)
	}
	return c.unschedule(name, owns)
}

func (c *Cleaner) unschedule(name string, owns sessions.OwnedBy) ([]string, error) {
	var steps []string
	for _, dir := range c.Paths.CronSpools {
		if err := removeIfExists(filepath.Join(dir, name)); err != nil {
			return steps, fmt.Errorf("removing the crontab: %w", err)
		}
	}
	steps = append(steps, "removed the crontab of "+name)
	jobs := 0
	for _, dir := range c.Paths.AtSpools {
		n, err := removeOwned(dir, owns, false)
		if err != nil {
			return steps, fmt.Errorf("removing at jobs: %w", err)
		}
		jobs += n
	}
	steps = append(steps, fmt.Sprintf("removed %d at jobs of %s", jobs, name))
	if c.Paths.LingerDir != "" {
		if err := removeIfExists(filepath.Join(c.Paths.LingerDir, name)); err != nil {
			return steps, fmt.Errorf("ending lingering: %w", err)
		}
	}
	return steps, nil
}

// removeCrashes removes what the account owns in dir (apport's reports;
// in /var/crash, world-writable on Ubuntu, also the directories it made
// there, whole, as in the temporary directories) and the files whose name
// gives its uid as systemd-coredump names its dumps
// (core.COMM.UID.BOOT-ID.PID.TIMESTAMP[.COMPRESSION], owned by root), and
// reports how many.
func removeCrashes(dir string, owns sessions.OwnedBy, uid int) (int, error) {
	n, err := removeOwned(dir, owns, true)
	if err != nil {
		return n, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !coreDumpOf(e.Name(), uid) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// coreDumpOf says whether name is a systemd-coredump file of uid's process.
// The command name may hold dots, so the uid is counted from the end:
// BOOT-ID, PID and TIMESTAMP follow it, then an optional compression suffix.
func coreDumpOf(name string, uid int) bool {
	rest, ok := strings.CutPrefix(name, "core.")
	if !ok {
		return false
	}
	fields := strings.Split(rest, ".")
	for _, tail := range []int{4, 5} { // without and with the compression suffix
		if i := len(fields) - tail; i >= 1 && fields[i] == strconv.Itoa(uid) && len(fields[i+1]) == 32 {
			return true
		}
	}
	return false
}

// emptyRuntimeDir removes what is in dir, the uid's runtime directory, and
// reports how many entries. The directory stays (logind mounts a tmpfs
// there); one that is missing, or not a directory of uid's, is left alone.
func emptyRuntimeDir(dir string, uid int) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != uid {
		return 0, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // logind removes it once the uid's last session ends
	}
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return 0, err
		}
	}
	return len(entries), nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeOwned removes the entries of dir the account owns (whole trees when
// trees), and reports how many. A missing dir has none. With trees it looks
// inside the directories of others too: a shared directory such as
// /tmp/.X11-unix (root's, 1777) holds the tenant's files as well. Nothing is
// followed.
func removeOwned(dir string, owns sessions.OwnedBy, trees bool) (int, error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer root.Close()
	return removeOwnedBelow(root, owns, trees, maxSharedDepth)
}

// maxSharedDepth bounds how deep removeOwned looks into others' directories.
const maxSharedDepth = 16

// removeOwnedBelow works from dir's descriptor, never from a path: the
// owner of a directory it looks into (another user, still logged in) can
// swap that directory for a symlink to one of root's between the look and
// the removal, and a path resolved again would then remove root's file of
// the same name (TestASweepOfSharedDirectoriesFollowsNothingAnotherUserSwaps).
// A directory it goes into is held open, so a swap changes nothing of what
// it removes, and os.Root refuses a symlink swapped in that leads out of
// dir.
//
// A directory removed while the sweep is in it reads as gone (ENOENT), not
// empty: other programs make and remove their own in /tmp all the time,
// and such a directory holds nothing, since only an empty one can be
// removed. Its sweep has nothing to do; failing it would fail the
// cleaning and put the node in maintenance.
func removeOwnedBelow(dir *os.Root, owns sessions.OwnedBy, trees bool, depth int) (int, error) {
	listed, err := dir.Open(".")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	entries, err := listed.ReadDir(-1)
	listed.Close()
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		info, err := dir.Lstat(e.Name())
		if err != nil {
			continue
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		if !owns(int(st.Uid)) {
			if trees && depth > 0 && info.IsDir() {
				below, err := removeOwnedIn(dir, e.Name(), owns, depth-1)
				n += below
				if err != nil {
					return n, err
				}
			}
			continue
		}
		if info.IsDir() && !trees {
			continue
		}
		if err := dir.RemoveAll(e.Name()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// removeOwnedIn goes into dir's subdirectory name, unless it is gone.
func removeOwnedIn(dir *os.Root, name string, owns sessions.OwnedBy, depth int) (int, error) {
	sub, err := dir.OpenRoot(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	return removeOwnedBelow(sub, owns, true, depth)
}

// resetHome empties home and fills it from skel, owned by uid:gid, with the
// home itself 0700. Nothing in it is followed: a tenant's symlink is removed
// as a link, never as what it points to. While it works the home is root's,
// 0700: a process of the tenant's that is still running (or starting) can
// neither add an entry after the listing nor swap a file root is about to
// change for a symlink; the tenant gets the home back last.
func resetHome(home, skel string, uid, gid int) error {
	info, err := os.Lstat(home)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(home, 0o700); err != nil {
			return err
		}
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory", home)
	default:
		if err := takeBack(home); err != nil {
			return err
		}
		entries, err := os.ReadDir(home)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(home, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := takeBack(home); err != nil {
		return err
	}
	if skel != "" {
		if err := copySkeleton(skel, home, uid, gid); err != nil {
			return err
		}
	}
	return os.Lchown(home, uid, gid)
}

// takeBack makes the directory dir root's (the agent's own) and 0700,
// through a descriptor opened without following a symlink.
func takeBack(dir string) error {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, os.Geteuid(), os.Getegid()); err != nil {
		return &fs.PathError{Op: "chown", Path: dir, Err: err}
	}
	if err := syscall.Fchmod(fd, 0o700); err != nil {
		return &fs.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
}

// copySkeleton copies skel into home, each entry owned by uid:gid with the
// skeleton's mode.
func copySkeleton(skel, home string, uid, gid int) error {
	return filepath.WalkDir(skel, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == skel {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(skel, path)
		if err != nil || rel == "." {
			return err
		}
		dst := filepath.Join(home, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(dst, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, dst, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // no devices or sockets from a skeleton
		}
		if err := os.Lchown(dst, uid, gid); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return os.Chmod(dst, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runCommand runs the operator's command in a process group of its own, so
// that a timeout ends whatever it started.
func (c *Cleaner) runCommand(ctx context.Context, request int64, users []string) (int32, string, error) {
	timeout := c.CommandTimeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command("/bin/sh", "-c", c.Command)
	cmd.Env = append(os.Environ(), "NODUS_CLEAN_USERS="+strings.Join(users, " "), fmt.Sprintf("NODUS_CLEAN_REQUEST=%d", request))
	var out tail
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child left running with the output open must not hold the cleaning.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, "", fmt.Errorf("starting the clean command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing it started outlives it
		code := int32(cmd.ProcessState.ExitCode())
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return code, out.String(), err
		}
		return code, out.String(), nil
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if parent.Err() != nil {
			return -1, out.String(), fmt.Errorf("the clean command was interrupted: %w", parent.Err())
		}
		return -1, out.String(), fmt.Errorf("the clean command did not finish within %s and was killed", timeout)
	}
}

// tail keeps the last MaxOutput bytes written to it.
type tail struct{ buf bytes.Buffer }

func (t *tail) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if t.buf.Len() > 2*MaxOutput {
		keep := t.buf.Bytes()[t.buf.Len()-MaxOutput:]
		t.buf = *bytes.NewBuffer(append([]byte(nil), keep...))
	}
	return len(p), nil
}

func (t *tail) String() string {
	b := t.buf.Bytes()
	if len(b) > MaxOutput {
		b = b[len(b)-MaxOutput:]
	}
	return strings.ToValidUTF8(string(b), "?")
}
