package cleaning

import (
	"context"
	"os"
	"os/exec"
	"os/user"
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
	id := strconv.Itoa(uid)
	out, err := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups",
		"keyctl", "session", "-", "/bin/sh", "-ec", "keyctl link @u @s\n"+script).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestACleaningEmptiesTheKeyringsThatOutliveTheTenant: the kernel keeps a
// uid's user keyring, user session keyring and persistent keyring after its
// last process ended (for good, or for days), and the next tenant of the
// account is the same uid: it would read the last tenant's secrets with
// keyctl. The cleaning removes every key from them, and leaves another
// uid's.
func TestACleaningEmptiesTheKeyringsThatOutliveTheTenant(t *testing.T) {
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
	const plant = `keyctl add user nodus-test-user tenant-secret @u >/dev/null
keyctl add user nodus-test-user-session tenant-secret @us >/dev/null
nested=$(keyctl newring nodus-test-nested @u)
keyctl add user nodus-test-in-nested tenant-secret "$nested" >/dev/null
keyctl add user nodus-test-persistent tenant-secret "$(keyctl get_persistent @s)" >/dev/null`
	if out, err := keyctlAs(s.uid, "keyctl describe @u"); err != nil {
		t.Skipf("this kernel keeps no keyrings (no CONFIG_KEYS, or a seccomp filter): %v: %s", err, out)
	}
	// What an earlier run left, so that the count below is this run's.
	if out, err := keyctlAs(s.uid, `keyctl clear @u; keyctl clear "$(keyctl get_persistent @s)"; keyctl clear @us; keyctl link @u @us`); err != nil {
		t.Fatalf("emptying the tenant's keyrings before the test: %v: %s", err, out)
	}
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
	if os.Getuid() != 0 {
		t.Skip("needs root: the tenant's keys are made as another uid (CI runs as root)")
	}
	for _, tool := range []string{"setpriv", "keyctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (.ci/run installs util-linux and keyutils): %v", tool, err)
		}
	}
	// A uid new to the kernel has no user keyring yet, and with its quota
	// full none can be made for it.
	fresh := 300000 + os.Getpid()%100000
	for _, tc := range []struct{ keyring, fill string }{
		{"persistent, of a uid that never had a user keyring", `keyctl session - /bin/sh -c 'p=$(keyctl get_persistent @s); while keyctl add user k$((i=i+1)) v "$p" >/dev/null 2>&1; do :; done'`},
		{"persistent", `p=$(keyctl get_persistent @us); while keyctl add user k$((i=i+1)) v "$p" >/dev/null 2>&1; do :; done`},
		{"user", `while keyctl add user k$((i=i+1)) v @u >/dev/null 2>&1; do :; done`},
	} {
		t.Run(tc.keyring, func(t *testing.T) {
			s := newScratch(t)
			s.cleaner.Paths.KernelKeyrings = true
			if strings.Contains(tc.keyring, "never") {
				s.uid = fresh
				home := s.home
				s.cleaner.Lookup = func(name string) (*user.User, error) {
					return &user.User{Username: name, Uid: strconv.Itoa(fresh), Gid: strconv.Itoa(fresh), HomeDir: home}, nil
				}
			} else {
				if out, err := keyctlAs(s.uid, "keyctl describe @u"); err != nil {
					t.Skipf("this kernel keeps no keyrings (no CONFIG_KEYS, or a seccomp filter): %v: %s", err, out)
				}
				// What an earlier test left.
				if r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil); r.Err != nil {
					t.Fatalf("emptying the keyrings before the test: %v", r.Err)
				}
				waitForKeysOf(t, s.uid, 10)
			}
			// The tenant's keys, up to its quota.
			id := strconv.Itoa(s.uid)
			if out, err := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "/bin/sh", "-c", tc.fill).CombinedOutput(); err != nil {
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
	data, err := os.ReadFile("/proc/key-users")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		// "  UID:  usage nkeys/nikeys qnkeys/maxkeys qnbytes/maxbytes"
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == strconv.Itoa(uid)+":" {
			n, _ := strconv.Atoi(strings.Split(f[2], "/")[0])
			return n
		}
	}
	return 0
}
