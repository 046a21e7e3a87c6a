package cleaning

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestALastLoginIsClearedByLastlog: the cleaning has lastlog(8) clear the
// account's record where the file exists, and says in its steps when it
// could not; it never fails on it. The real lastlog and sshd are the e2e
// handover test's; here a stand-in on PATH records what it was asked.
func TestALastLoginIsClearedByLastlog(t *testing.T) {
	bin := t.TempDir()
	asked := filepath.Join(bin, "asked")
	stub := func(t *testing.T, exit string) {
		t.Helper()
		script := "#!/bin/sh\necho \"$@\" >> " + asked + "\necho refused >&2\nexit " + exit + "\n"
		if err := os.WriteFile(filepath.Join(bin, "lastlog"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	clean := func(t *testing.T, file string) string {
		t.Helper()
		s := newScratch(t)
		s.cleaner.Paths.LastLog = file
		r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil)
		if r.Err != nil {
			t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
		}
		return strings.Join(r.Steps, "\n")
	}
	file := filepath.Join(t.TempDir(), "lastlog")
	if err := os.WriteFile(file, nil, 0o664); err != nil {
		t.Fatal(err)
	}

	stub(t, "0")
	if steps := clean(t, file); !strings.Contains(steps, "cleared the last login of tenant") {
		t.Errorf("steps: %s", steps)
	}
	if got, _ := os.ReadFile(asked); string(got) != "--clear --user tenant\n" {
		t.Errorf("lastlog was asked %q", got)
	}

	stub(t, "1")
	if steps := clean(t, file); !strings.Contains(steps, "the last login of tenant in "+file+" was not cleared") || !strings.Contains(steps, "refused") {
		t.Errorf("a lastlog that fails is not said in the steps: %s", steps)
	}

	_ = os.Remove(asked)
	if steps := clean(t, filepath.Join(t.TempDir(), "none")); !strings.Contains(steps, "no last login recorded") {
		t.Errorf("steps: %s", steps)
	}
	if _, err := os.Stat(asked); err == nil {
		t.Error("lastlog ran where there is no lastlog file")
	}

	if err := os.Remove(filepath.Join(bin, "lastlog")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if steps := clean(t, file); !strings.Contains(steps, "was not cleared") {
		t.Errorf("a host without lastlog is not said in the steps: %s", steps)
	}
}
