package cleaning

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestACleaningRemovesTheJournalsOfTheTenantsUIDs: journald keeps what a
// non-system uid logs in a journal of that uid's (user-UID.journal, and
// its archives), which the uid itself reads with `journalctl --user`; the
// next tenant of the account is that uid. The cleaning removes the files
// of the account's uid and of its subordinate uids, in every machine's and
// namespace's directory, and nobody else's.
func TestACleaningRemovesTheJournalsOfTheTenantsUIDs(t *testing.T) {
	s := newScratch(t)
	subuid := filepath.Join(s.root, "subuid")
	if err := os.WriteFile(subuid, []byte("someone:100000:65536\ntenant:165536:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cleaner.Paths.SubUIDFile = subuid
	s.cleaner.Paths.JournalDirs = []string{filepath.Join(s.root, "log/journal"), filepath.Join(s.root, "run/log/journal")}
	machine := strings.Repeat("3d", 16)
	me := strconv.Itoa(s.uid)
	gone := []string{
		"log/journal/" + machine + "/user-" + me + ".journal",
		"log/journal/" + machine + "/user-" + me + "@26be9edf37474c96b33b2fef0905171a-0000000000000001-000662131668d165.journal",
		"log/journal/" + machine + "/user-" + me + "@000662131668d165-2f1e4c6b0d9a8e7f.journal~",
		"log/journal/" + machine + ".batch/user-" + me + ".journal", // a journald namespace's
		"log/journal/" + machine + "/user-166536.journal",           // a subordinate uid's
		"run/log/journal/" + machine + "/user-" + me + ".journal",   // volatile storage
		"log/journal/user-" + me + ".journal",                       // a journald with no machine ID
	}
	kept := []string{
		"log/journal/" + machine + "/system.journal",
		"log/journal/" + machine + "/user-1" + me + ".journal",
		"log/journal/" + machine + "/user-100001.journal", // another account's subordinate uid
		"log/journal/" + machine + "/user-" + me + ".journal.bak",
		"log/journal/" + machine + "/user-" + me + "x.journal",
		"log/journal/" + machine + "/user-+" + me + ".journal",
	}
	for _, path := range append(append([]string{}, gone...), kept...) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(s.root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.root, path), []byte("journal\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// A directory named like a journal is not journald's: nothing is followed or removed whole.
	if err := os.MkdirAll(filepath.Join(s.root, "log/journal", machine, "user-"+me+"@dir.journal", "inside"), 0o755); err != nil {
		t.Fatal(err)
	}

	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	for _, path := range gone {
		if s.exists(path) {
			t.Errorf("%s survived the cleaning", path)
		}
	}
	for _, path := range append(kept, "log/journal/"+machine+"/user-"+me+"@dir.journal/inside") {
		if !s.exists(path) {
			t.Errorf("%s, not the tenant's journal, was removed", path)
		}
	}
	steps := strings.Join(r.Steps, "\n")
	if !strings.Contains(steps, "removed 7 journal files of tenant") {
		t.Errorf("the steps do not count the journal files: %v", r.Steps)
	}
	// No journald listens here: each is said once, however many of its directories lost a file.
	for _, journald := range []string{"journald was not asked", "journald batch was not asked"} {
		if n := strings.Count(steps, journald); n != 1 {
			t.Errorf("%q is said %d times in the steps: %v", journald, n, r.Steps)
		}
	}
}

// TestACleaningRemovesTheTenantsJournal runs a real journald (a namespace
// of its own, its storage in a scratch directory) and shows the handover
// it guards: what the tenant's programs logged, the next tenant of the
// account (the same uid) reads with journalctl, until the cleaning; and
// what that next tenant logs after it is still kept for it (journald,
// which held the removed file open, starts a new one).
func TestACleaningRemovesTheTenantsJournal(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: journald runs as root and the tenant as another uid (CI runs as root)")
	}
	journald := ""
	for _, path := range []string{"/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald"} {
		if _, err := os.Stat(path); err == nil {
			journald = path
			break
		}
	}
	if journald == "" {
		t.Skip("systemd-journald is not installed (package systemd; .ci/run installs it)")
	}
	for _, tool := range []string{"journalctl", "logger", "setpriv", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	s := newScratch(t)
	// journald writes under /var/log/journal: its own /var/log is a
	// scratch directory, bound there in a mount namespace of its own.
	varLog := filepath.Join(s.root, "var-log")
	store := filepath.Join(varLog, "journal")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	// The tenant reads the store by its path, as the next tenant would
	// /var/log/journal: the test's own directories let it through (those
	// above are the system's, /tmp, which do).
	for _, dir := range []string{filepath.Dir(s.root), s.root, varLog} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "--", "mount", "--bind", varLog, "/var/log").CombinedOutput(); err != nil {
		t.Skipf("no mount namespace with a directory bound on /var/log can be made here (a container without CAP_SYS_ADMIN?): %v: %s", err, out)
	}
	if out, err := exec.Command("setpriv", "--reuid", strconv.Itoa(s.uid), "--regid", strconv.Itoa(s.uid), "--clear-groups",
		"test", "-x", store).CombinedOutput(); err != nil {
		t.Skipf("uid %d cannot reach %s (a temporary directory closed to others?): %v: %s", s.uid, store, err, out)
	}
	s.cleaner.Paths.JournalDirs, s.cleaner.Paths.JournaldRuntime = []string{store}, "/run/systemd"
	namespace := "nodus-test-" + randomHex(t)
	runtime := "/run/systemd/journal." + namespace
	daemon := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /var/log && exec "$1" "$2"`, varLog, journald, namespace)
	daemonOut, err := os.Create(filepath.Join(s.root, "journald.out"))
	if err != nil {
		t.Fatal(err)
	}
	daemon.Stdout, daemon.Stderr = daemonOut, daemonOut
	_, err = os.Stat("/run/systemd")
	madeRunSystemd := os.IsNotExist(err) // journald makes it where no systemd did
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
		_ = daemonOut.Close()
		_ = os.RemoveAll(runtime)
		if madeRunSystemd {
			_ = os.Remove("/run/systemd") // if empty
		}
	})
	waitFor(t, "journald's sockets", func() (bool, string) {
		_, err := os.Stat(filepath.Join(runtime, "io.systemd.journal"))
		return err == nil, fmt.Sprint(err)
	}, daemonOut.Name())

	logAs := func(line string) {
		t.Helper()
		out, err := exec.Command("setpriv", "--reuid", strconv.Itoa(s.uid), "--regid", strconv.Itoa(s.uid), "--clear-groups",
			"logger", "--socket", filepath.Join(runtime, "dev-log"), line).CombinedOutput()
		if err != nil {
			t.Fatalf("logging as the tenant's uid: %v: %s", err, out)
		}
	}
	// What the uid reads of the store with journalctl: the next tenant's view.
	readAs := func() string {
		t.Helper()
		dirs, err := filepath.Glob(filepath.Join(store, "*."+namespace))
		if err != nil || len(dirs) != 1 {
			t.Fatalf("journald's directory of the namespace: %v, %v", dirs, err)
		}
		out, _ := exec.Command("setpriv", "--reuid", strconv.Itoa(s.uid), "--regid", strconv.Itoa(s.uid), "--clear-groups",
			"journalctl", "--directory", dirs[0], "--output", "cat").CombinedOutput()
		return string(out)
	}

	secret := "the tenant's secret " + randomHex(t)
	logAs(secret)
	waitFor(t, "the tenant's line in the journal it reads", func() (bool, string) {
		seen := readAs()
		return strings.Contains(seen, secret), seen
	}, daemonOut.Name())

	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	if seen := readAs(); strings.Contains(seen, secret) {
		t.Fatalf("the next tenant of the account reads the last one's journal after the cleaning:\n%s", seen)
	}
	steps := strings.Join(r.Steps, "\n")
	if !strings.Contains(steps, "removed 1 journal files of tenant") || !strings.Contains(steps, "journald "+namespace+" started new journal files") {
		t.Errorf("the steps do not say what was done with the journal: %v", r.Steps)
	}

	next := "the next tenant's line " + randomHex(t)
	logAs(next)
	waitFor(t, "the next tenant's first line in the journal it reads", func() (bool, string) {
		seen := readAs()
		return strings.Contains(seen, next), seen
	}, daemonOut.Name())
	if seen := readAs(); strings.Contains(seen, secret) {
		t.Fatalf("the last tenant's line came back with the next one's:\n%s", seen)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// waitFor polls cond for up to 30 s, as testfleet.Eventually (which this
// package's tests cannot import: it imports the agent); what cond last saw
// and what the daemon wrote to daemonOut explain a failure.
func waitFor(t *testing.T, what string, cond func() (bool, string), daemonOut string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			ok, seen := cond()
			last = seen
			return ok, nil
		})
	if err != nil {
		said, _ := os.ReadFile(daemonOut)
		t.Fatalf("%s: not seen in 30 s; last seen:\n%s\njournald said:\n%s", what, last, said)
	}
}
