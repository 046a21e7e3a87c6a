package cleaning

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keyctlAs runs a shell script of keyctl commands as uid, in a session
// keyring of its own that links the user keyring, as a login through PAM's
// pam_keyinit has: the session keyring ends with the script, the keyrings
// it names stay.
func keyctlAs(uid int, script string) (string, error) {
	out, err := as(uid, "keyctl", "session", "-", "/bin/sh", "-ec", "keyctl link @u @s\n"+script).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// as is the command args, run as uid (and its gid) with no other group.
func as(uid int, args ...string) *exec.Cmd {
	id := strconv.Itoa(uid)
	return exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups"}, args...)...)
}

// TestACleaningEmptiesTheKeyringsThatOutliveTheTenant: the kernel keeps a
// uid's user keyring, user session keyring and persistent keyring after its
// last process ended (for good, or for days), and the next tenant of the
// account is the same uid: it would read the last tenant's secrets with
// keyctl. The cleaning removes every key from them, and leaves another
// uid's.
func TestACleaningEmptiesTheKeyringsThatOutliveTheTenant(t *testing.T) {
	s := keyringScratch(t, 0)
	const plant = `keyctl add user nodus-test-user tenant-secret @u >/dev/null
keyctl add user nodus-test-user-session tenant-secret @us >/dev/null
nested=$(keyctl newring nodus-test-nested @u)
keyctl add user nodus-test-in-nested tenant-secret "$nested" >/dev/null
keyctl add user nodus-test-persistent tenant-secret "$(keyctl get_persistent @s)" >/dev/null`
	if out, err := keyctlAs(s.uid, plant); err != nil {
		t.Fatalf("planting the tenant's keys: %v: %s", err, out)
	}
	if out, err := keyctlAs(s.uid+1, "keyctl add user nodus-test-other others-secret @u"); err != nil {
		t.Fatalf("planting another uid's key: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = keyctlAs(s.uid+1, "keyctl clear @u") })
	// Each found, from a process of the uid that started after the tenant's.
	found := map[string]string{
		"nodus-test-user":         "keyctl search @u user nodus-test-user",
		"nodus-test-user-session": "keyctl search @us user nodus-test-user-session",
		"nodus-test-in-nested":    "keyctl search @u user nodus-test-in-nested",
		"nodus-test-persistent":   `keyctl search "$(keyctl get_persistent @s)" user nodus-test-persistent`,
	}
	for key, search := range found {
		if out, err := keyctlAs(s.uid, search); err != nil {
			t.Fatalf("%s is not found before the cleaning: %v: %s", key, err, out)
		}
	}

	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	for key, search := range found {
		if out, err := keyctlAs(s.uid, search); err == nil {
			t.Errorf("the tenant's %s is found after the cleaning (key %s)", key, out)
		}
	}
	if out, err := keyctlAs(s.uid, "keyctl search @us keyring _uid."+strconv.Itoa(s.uid)); err != nil {
		t.Errorf("the user session keyring no longer links the user keyring, as the kernel made it: %v: %s", err, out)
	}
	if out, err := keyctlAs(s.uid+1, "keyctl search @u user nodus-test-other"); err != nil {
		t.Errorf("another uid's key was removed: %v: %s", err, out)
	}
	if !strings.Contains(strings.Join(r.Steps, "\n"), "removed 4 keys from the kernel keyrings of tenant") {
		t.Errorf("the steps do not count the keys: %v", r.Steps)
	}
}

// TestATenantsFullKeyQuotaDoesNotStopTheCleaning: a uid may own 200 keys
// (kernel.keys.maxkeys). A tenant that used them all, in its persistent
// keyring or its user keyring, leaves none for the cleaning to make: the
// cleaning still removes them, and the node is not held in maintenance by
// the tenant it is taken from.
func TestATenantsFullKeyQuotaDoesNotStopTheCleaning(t *testing.T) {
	for i, tc := range []struct{ keyring, fill string }{
		{"persistent, of a uid that never had a user keyring", `keyctl session - /bin/sh -c 'p=$(keyctl get_persistent @s); while keyctl add user k$((i=i+1)) v "$p" >/dev/null 2>&1; do :; done'`},
		{"persistent", `p=$(keyctl get_persistent @us); while keyctl add user k$((i=i+1)) v "$p" >/dev/null 2>&1; do :; done`},
		{"user", `while keyctl add user k$((i=i+1)) v @u >/dev/null 2>&1; do :; done`},
	} {
		t.Run(tc.keyring, func(t *testing.T) {
			// A uid new to the kernel has no user keyring yet, and with its
			// quota full none can be made for it.
			s := keyringScratch(t, 10+i)
			if !strings.Contains(tc.keyring, "never") {
				if out, err := keyctlAs(s.uid, "keyctl describe @u"); err != nil {
					t.Fatalf("making the user keyring: %v: %s", err, out)
				}
			}
			// The tenant's keys, up to its quota.
			if out, err := as(s.uid, "/bin/sh", "-c", tc.fill).CombinedOutput(); err != nil {
				t.Fatalf("filling the quota: %v: %s", err, out)
			}
			if out := keysOf(t, s.uid); out < 190 {
				t.Fatalf("the tenant owns %d keys: the quota did not fill", out)
			}
			r := s.cleaner.Clean(context.Background(), 2, []string{"tenant"}, nil)
			if r.Err != nil {
				t.Fatalf("clean with the tenant's key quota full: %v (steps %v)", r.Err, r.Steps)
			}
			if !regexp.MustCompile(`removed 1[5-9][0-9] keys from the kernel keyrings of tenant`).MatchString(strings.Join(r.Steps, "\n")) {
				t.Errorf("the steps do not count the tenant's keys (about 200): %v", r.Steps)
			}
			// The kernel destroys an unlinked key a moment later.
			waitForKeysOf(t, s.uid, 10)
			if out, err := keyctlAs(s.uid, `keyctl search @u user k1 || keyctl search "$(keyctl get_persistent @s)" user k1`); err == nil {
				t.Errorf("a key of the tenant's is found after the cleaning: %s", out)
			}
		})
	}
}

// waitForKeysOf waits until uid owns at most n keys (/proc/key-users): the
// kernel's garbage collector destroys keys no keyring links, and gives
// their quota back, a moment after they were unlinked.
func waitForKeysOf(t *testing.T, uid, n int) {
	t.Helper()
	owned := -1
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if owned = keysOf(t, uid); owned <= n {
			return
		}
	}
	t.Fatalf("uid %d still owns %d keys, want at most %d", uid, owned, n)
}

// keysOf is how many keys uid owns, as /proc/key-users counts them.
func keysOf(t *testing.T, uid int) int {
	t.Helper()
	n, err := ownedKeys(uid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keyringScratch is a scratch account of a uid new to this kernel (one per
// test process and n): the kernel keeps a uid's keyrings as long as it
// runs, whatever an earlier test did to them. Some tests leave keys no one
// can remove until the host restarts, so the uids lie above every range
// useradd hands out as subordinate uids (SUB_UID_MAX, 600100000 by
// default): a cleaning of an account another test made, which removes its
// subordinate uids' keys, fails on none of them. It skips where the kernel
// keeps none.
func keyringScratch(t *testing.T, n int) *scratch {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the tenant's keys are made as another uid (CI runs as root)")
	}
	for _, tool := range []string{"setpriv", "keyctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (.ci/run installs util-linux and keyutils): %v", tool, err)
		}
	}
	s := newScratch(t)
	s.cleaner.Paths.KernelKeyrings = true
	s.uid = scratchUIDs + (os.Getpid()%10000)*50 + n
	uid, home := strconv.Itoa(s.uid), s.home
	s.cleaner.Lookup = func(name string) (*user.User, error) {
		if name != "tenant" {
			return nil, user.UnknownUserError(name)
		}
		return &user.User{Username: name, Uid: uid, Gid: uid, HomeDir: home}, nil
	}
	if out, err := as(s.uid, "keyctl", "show", "@s").CombinedOutput(); err != nil {
		t.Skipf("this kernel keeps no keyrings (no CONFIG_KEYS, or a seccomp filter): %v: %s", err, out)
	}
	return s
}

// TestATenantThatLockedItsKeyringsDoesNotStopTheCleaning: a keyring's owner
// may take every permission on its user keyring away, its own too
// (keyctl setperm @u 0; on the persistent keyring it may not):
// then no process of the uid, the cleaning's nor the next tenant's, can read
// or search it again. The cleaning does not fail on it (which would hold
// the node in maintenance until the host restarts), and the next tenant
// finds nothing. (A key left in it that the cleaning cannot remove fails
// the cleaning: TestAKeyTheTenantLockedInIsNotLeftToTheNext.)
func TestATenantThatLockedItsKeyringsDoesNotStopTheCleaning(t *testing.T) {
	s := keyringScratch(t, 5)
	const lock = `keyctl add user locked-away tenant-secret @u >/dev/null
keyctl setperm "$(keyctl search @u user locked-away)" 0x3f0b0000
p=$(keyctl get_persistent @s)
keyctl add user locked-away tenant-secret "$p" >/dev/null
keyctl add user locked-away tenant-secret @us >/dev/null
keyctl setperm @u 0`
	if out, err := keyctlAs(s.uid, lock); err != nil {
		t.Fatalf("locking the tenant's keyrings: %v: %s", err, out)
	}
	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean after the tenant locked its keyrings: %v (steps %v)", r.Err, r.Steps)
	}
	for _, ring := range []string{"@u", "@us", `"$(keyctl get_persistent @s)"`} {
		if out, err := keyctlAs(s.uid, "keyctl search "+ring+" user locked-away"); err == nil {
			t.Errorf("the next tenant finds the key in %s: %s", ring, out)
		}
	}
	// Nor by its id (/proc/keys lists what the uid may view), from a
	// process without a session keyring, which searches the user session
	// keyring, as a cron job of the next tenant's is.
	out, _ := as(s.uid, "/bin/sh", "-c", `for key in $(grep locked-away /proc/keys | cut -d' ' -f1); do keyctl print 0x$key; done`).CombinedOutput()
	if strings.Contains(string(out), "tenant-secret") {
		t.Errorf("the next tenant reads a key of the last one by its id: %s", out)
	}
}

// TestTheKeyringWorkLeavesTheProcessRoots: the keyrings are emptied on a
// thread that takes on the tenant's uid. Were that the main thread, which
// the runtime never ends, the process would stay the tenant's to signal
// (its next kill -1 ended nodusd) and to own in /proc. Run many times, the
// work lands on the main thread at times; the process stays root's.
func TestTheKeyringWorkLeavesTheProcessRoots(t *testing.T) {
	s := keyringScratch(t, 6)
	for range 200 {
		if _, err := removeKeys(s.uid); err != nil {
			t.Fatal(err)
		}
		status, err := os.ReadFile("/proc/self/status") // of the main thread
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "Uid:") && strings.Join(strings.Fields(line)[1:], " ") != "0 0 0 0" {
				t.Fatalf("the process is no longer root's: %s", line)
			}
		}
	}
}

// scratchUIDs is where the keyring tests' uids begin (keyringScratch).
const scratchUIDs = 700000000

// TestAKeyTheTenantLockedInIsNotLeftToTheNext: a tenant may lock its
// keyrings (keyctl setperm @u 0) with keys in them that its uid may view
// and read. The cleaning, which cannot read a locked keyring, took it as
// out of everyone's reach; but a key is read by its id, which /proc/keys
// lists to every process of the uid that may view it: the next tenant, the
// same uid, read it. Or the tenant keeps the right to set a keyring's
// permissions, and the next one gives itself the rest back (by the
// keyring's id, which it may guess). A key the
// cleaning can neither remove nor change, which the next tenant could
// read, fails the cleaning; so does one hidden from the uid (no right to
// view it), whose id a process may guess.
func TestAKeyTheTenantLockedInIsNotLeftToTheNext(t *testing.T) {
	defer func(was time.Duration) { keysSettle = was }(keysSettle)
	keysSettle = time.Second
	for i, tc := range []struct {
		name, perm, lock string
		fails            string
	}{
		{name: "locked for good", perm: "0x3f0b0000", lock: "keyctl setperm @u 0"},
		{name: "locked but for its permissions", perm: "0x3f0b0000", lock: "keyctl setperm @u 0x20200000"},
		{name: "a key that may only be revoked", perm: "0x3f230000", lock: "keyctl setperm @u 0"},
		{name: "a key that may only be read", perm: "0x3f030000", lock: "keyctl setperm @u 0", fails: "stays"},
		{name: "a key hidden from its uid", perm: "0x3f020000", lock: "keyctl setperm @u 0", fails: "hidden from its own uid"},
		// Its rights as the kernel gives them (the uid views it, its
		// possessor reads it) in a keyring the next tenant may give itself
		// every right to again, by the id /proc/keys lists.
		{name: "a key in a keyring the next may unlock", perm: "0x3f010000", lock: "keyctl setperm @u 0x00210000"},
		// The cleaning gives that keyring its rights back first (it may,
		// as the next tenant may), and takes the key out of it.
		{name: "a key that may only be read, in a keyring the next may unlock", perm: "0x3f030000", lock: "keyctl setperm @u 0x00210000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := keyringScratch(t, 20+i)
			plant := `k=$(keyctl add user readable-by-id tenant-secret @u)
keyctl setperm "$k" ` + tc.perm + `
echo "$k"
` + tc.lock
			id, err := keyctlAs(s.uid, plant)
			if err != nil {
				t.Fatalf("locking the tenant's key in: %v: %s", err, id)
			}
			id = id[strings.LastIndex(id, "\n")+1:]
			// As a process of the next tenant's with no session keyring of
			// its own (a cron job's), which cannot link the locked one: by
			// the id it finds in /proc/keys, or knows (one it guessed), or
			// in the keyring it unlocks.
			next := `for key in $(grep readable-by-id /proc/keys | cut -d' ' -f1); do keyctl print 0x$key; done
keyctl print ` + id + `
u=$(grep " _uid.` + strconv.Itoa(s.uid) + `: " /proc/keys | cut -d' ' -f1)
[ -n "$u" ] && keyctl setperm 0x$u 0x3f3f0000 && keyctl session - /bin/sh -c "keyctl link 0x$u @s && keyctl print ` + id + `"
true`
			read := func() string {
				out, _ := as(s.uid, "/bin/sh", "-c", next).CombinedOutput()
				return string(out)
			}
			if out := read(); !strings.Contains(out, "tenant-secret") {
				t.Fatalf("the planted key cannot be read before the cleaning: the test does not test the case: %s", out)
			}
			// Locked again where reading it unlocked it.
			relock := `u=$(grep " _uid.` + strconv.Itoa(s.uid) + `: " /proc/keys | cut -d' ' -f1)
[ -z "$u" ] || keyctl setperm 0x$u ` + strings.Fields(tc.lock)[3]
			if out, err := as(s.uid, "/bin/sh", "-c", relock).CombinedOutput(); err != nil {
				t.Fatalf("locking the keyring again: %v: %s", err, out)
			}
			r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
			switch out := read(); {
			case tc.fails == "" && r.Err != nil:
				t.Errorf("the cleaning failed: %v (steps %v)", r.Err, r.Steps)
			case tc.fails == "" && strings.Contains(out, "tenant-secret"):
				t.Errorf("the next tenant reads the last one's key: %s (steps %v)", out, r.Steps)
			case tc.fails != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), tc.fails)):
				t.Errorf("the cleaning of a key the next tenant reads: %v, want an error saying %q (steps %v)", r.Err, tc.fails, r.Steps)
			}
		})
	}
}

// TestTheKeysOfTheTenantsSubordinateUIDsGoToo: a tenant's rootless
// containers run as its subordinate uids (subuid(5)), which the kernel
// keeps keyrings for as for any uid, and the next tenant of the account
// gets the same range. The cleaning ends those uids' processes and removes
// their IPC, and kept their keys.
func TestTheKeysOfTheTenantsSubordinateUIDsGoToo(t *testing.T) {
	s := keyringScratch(t, 30)
	sub := scratchUIDs + 1000000 + (os.Getpid()%10000)*20
	subuids := filepath.Join(t.TempDir(), "subuid")
	if err := os.WriteFile(subuids, []byte(fmt.Sprintf("someone:%d:5\ntenant:%d:10\n", sub+10, sub)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cleaner.Paths.SubUIDFile = subuids
	inside := sub + 3
	if out, err := keyctlAs(inside, "keyctl add user in-a-container tenant-secret @u >/dev/null"); err != nil {
		t.Fatalf("planting a key as a subordinate uid: %v: %s", err, out)
	}
	if out, err := keyctlAs(sub+12, "keyctl add user someone-elses others-secret @u >/dev/null"); err != nil {
		t.Fatalf("planting another account's subordinate uid's key: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = keyctlAs(sub+12, "keyctl clear @u") })
	r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
	if r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	if out, err := keyctlAs(inside, "keyctl search @u user in-a-container"); err == nil {
		t.Errorf("the next tenant's container finds the last one's key (key %s)", out)
	}
	if out, err := keyctlAs(sub+12, "keyctl search @u user someone-elses"); err != nil {
		t.Errorf("another account's subordinate uid's key was removed: %v: %s", err, out)
	}
}

// TestAKeyringTheTenantChangedIsGivenBackAsTheKernelMadeIt: a tenant that
// locked its user keyring (or its user session keyring) but kept the
// right to set its permissions left it locked for the next tenant of the
// account, whose keyctl add … @u was refused until the host restarted; one
// that took the right to write it away failed the cleaning (its keys could
// not be unlinked), holding the node in maintenance. The cleaning gives
// both keyrings the permissions the kernel made them with back, and
// empties them; one the tenant set to expire does not expire; and a
// keyring of the tenant's own named like the locked one (/proc/keys lists
// both, the tenant's first) was given its rights in its place while the
// real one was revoked, by the right to set it the tenant had kept. (A
// keyring locked for good, with no such right left, stays locked:
// TestATenantThatLockedItsKeyringsDoesNotStopTheCleaning.)
func TestAKeyringTheTenantChangedIsGivenBackAsTheKernelMadeIt(t *testing.T) {
	// The ids first: once one of the two is locked, the kernel finds the
	// other by its special id no more.
	const change = `u=$(keyctl id @u); us=$(keyctl id @us)
EXTRA
keyctl setperm "$us" PERM
keyctl setperm "$u" PERM`
	// A keyring named as the user keyring and listed before it (/proc/keys
	// lists keys by id): made again until its id is lower (the others go,
	// within the uid's key quota).
	const decoys = `for i in $(seq 64); do d=$(keyctl newring _uid.UID "$us"); [ "$d" -lt "$u" ] && break; keyctl unlink "$d" "$us" >/dev/null; done
[ "$d" -lt "$u" ]`
	// As /proc/keys shows when the two expire ("perm": never).
	expiry := func(uid int) string {
		out, _ := as(uid, "/bin/sh", "-c", fmt.Sprintf(`grep -E " _uid(_ses)?\.%d: " /proc/keys | awk '{print $4}' | sort -u`, uid)).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	// As rdescribe shows them, without keyctlAs's first line.
	describe := func(uid int) (string, error) {
		out, err := keyctlAs(uid, "keyctl rdescribe @u; keyctl rdescribe @us")
		return out[strings.Index(out, "\n")+1:], err
	}
	for i, tc := range []struct{ name, perm, extra string }{
		{"locked but for viewing it and setting its permissions", "0x00210000", ""},
		{"made unwritable", "0x002b0000", ""},
		{"set to expire", "0x3f3f0000", `keyctl timeout "$us" 3600; keyctl timeout "$u" 3600`},
		{"locked, behind keyrings of the tenant's named like it", "0x00210000", decoys},
		// No link again for as long as it lives (no right undoes it): the
		// next tenant's keyctl add … @u was refused until a restart.
		{"restricted", "0x3f3f0000", `keyctl restrict_keyring "$u"`},
		{"its user session keyring restricted", "0x3f3f0000", `keyctl restrict_keyring "$us"`},
		{"unlinked from its user session keyring", "0x3f3f0000", `keyctl unlink "$u" "$us"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := keyringScratch(t, 40+i)
			made, err := describe(s.uid)
			if err != nil {
				t.Fatalf("the keyrings as the kernel makes them: %v: %s", err, made)
			}
			extra := strings.ReplaceAll(tc.extra, "UID", strconv.Itoa(s.uid))
			plant := "keyctl add user changed tenant-secret @u >/dev/null\nkeyctl add user changed tenant-secret @us >/dev/null\n" +
				strings.NewReplacer("PERM", tc.perm, "EXTRA", extra).Replace(change)
			if out, err := keyctlAs(s.uid, plant); err != nil {
				t.Fatalf("changing the tenant's keyrings: %v: %s", err, out)
			}
			usable := func() error {
				out, err := keyctlAs(s.uid, "keyctl add user fresh next-tenants @u >/dev/null && keyctl add user fresh next-tenants @us >/dev/null")
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			}
			if out, err := describe(s.uid); err == nil && out == made && expiry(s.uid) == "perm" && usable() == nil {
				t.Fatalf("the keyrings did not change: the test does not test the case: %s", out)
			}
			r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
			if r.Err != nil {
				t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
			}
			if out, err := describe(s.uid); err != nil || out != made {
				t.Errorf("the next tenant's keyrings: %v\n%s\nwant them as the kernel made them:\n%s", err, out, made)
			}
			if e := expiry(s.uid); e != "perm" {
				t.Errorf("the next tenant's keyrings expire: %q, want never (perm)", e)
			}
			if err := usable(); err != nil {
				t.Errorf("the next tenant cannot use its keyrings: %v", err)
			}
			if out, err := keyctlAs(s.uid, "keyctl search @us keyring _uid."+strconv.Itoa(s.uid)); err != nil {
				t.Errorf("the next tenant's user session keyring does not link its user keyring, as the kernel makes it: %v: %s", err, out)
			}
			for _, ring := range []string{"@u", "@us"} {
				if out, err := keyctlAs(s.uid, "keyctl search "+ring+" user changed"); err == nil {
					t.Errorf("the next tenant finds the last one's key in %s: %s", ring, out)
				}
			}
		})
	}
}
