package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readOnly makes dir unwritable, for root too (chattr +i), or skips: what a
// dotfile manager's store is (home-manager, nix).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s immutable here (chattr: %v %s)", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", dir).Run() })
}

// TestAReadOnlySSHConfigIsNotWritten: ~/.ssh/config as a link into a
// read-only store. One whose owner added the Include line is left alone
// (nodus ssh works); one without it gets an error that gives the line to
// add, not a bare permission error.
func TestAReadOnlySSHConfigIsNotWritten(t *testing.T) {
	dir := t.TempDir()
	included := filepath.Join(dir, "nodus", "ssh", "config")
	store := filepath.Join(dir, "store")
	home := filepath.Join(dir, "home", ".ssh")
	for _, d := range []string{store, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	with := "# managed by home-manager\nInclude \"" + included + "\"\n\nHost *\n  ServerAliveInterval 30\n"
	without := "Host *\n  ServerAliveInterval 30\n  Include \"" + included + "\"\n" // inside a Host block: not for every host
	for name, text := range map[string]string{"with": with, "without": without} {
		if err := os.WriteFile(filepath.Join(store, name), []byte(text), 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(store, name), filepath.Join(home, name)); err != nil {
			t.Fatal(err)
		}
	}
	readOnly(t, store)

	if err := includeFrom(filepath.Join(home, "with"), included); err != nil {
		t.Errorf("a read-only configuration that includes nodus' already: %v", err)
	}
	err := includeFrom(filepath.Join(home, "without"), included)
	if err == nil || !strings.Contains(err.Error(), "add this line") || !strings.Contains(err.Error(), `Include "`+included+`"`) {
		t.Errorf("a read-only configuration without the line: %v", err)
	}
	for name, text := range map[string]string{"with": with, "without": without} {
		if got, _ := os.ReadFile(filepath.Join(store, name)); string(got) != text {
			t.Errorf("%s changed:\n%s", name, got)
		}
	}
}
