// Package safelogstest runs a command's test binary as the command itself,
// to see what the real command writes to its log.
package safelogstest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// asCommand, set to 1 in a test binary's environment, has it run as the
// command.
const asCommand = "NODUS_TEST_AS_COMMAND"

// Forged is what a name (a path, say) can carry into a log: a line break,
// an OSC sequence that retitles the terminal, a bell, a carriage return
// and the start of an entry of its own.
const Forged = "\n\x1b]0;owned\x07\rE1207 forged"

// escaped is Forged after its line break, as a log written as text shows
// it.
const escaped = `\x1b]0;owned\x07\x0dE1207 forged`

// Main is a command's TestMain: it runs main instead of the tests where a
// test started the binary as the command.
func Main(m *testing.M, main func()) {
	if os.Getenv(asCommand) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// FailsLoggingAsText runs the command with args, which must make it fail
// on a name that carries Forged, and checks that its log shows that name
// as text: escaped, with no control character of its own.
func FailsLoggingAsText(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asCommand+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("%q succeeded:\n%s", args, stderr.String())
	}
	got := stderr.String()
	if !strings.Contains(got, "command failed") || !strings.Contains(got, escaped) {
		t.Errorf("%q did not log the name, escaped:\n%q", args, got)
	}
	if strings.ContainsFunc(got, func(r rune) bool { return terminalsafe.IsControl(r) || terminalsafe.IsDirectionControl(r) }) {
		t.Errorf("a control character reached the log of %q:\n%q", args, got)
	}
}
