package cleaning

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
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
