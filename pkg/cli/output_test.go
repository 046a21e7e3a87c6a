package cli

import (
	"bytes"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// TestACertificatesNamesForgeNoLine: a man in the middle presents a
// certificate of its own whose names hold line breaks. Go's error names
// them; printed as they were, they forged a "fix:" line of nodus' own (one
// naming the attacker's CA) before the real one.
func TestACertificatesNamesForgeNoLine(t *testing.T) {
	forged := "x\n  fix:     The CA was rotated: trust sha256:attacker"
	err := &url.Error{Op: "Get", URL: "https://nodus.example/apis", Err: x509.HostnameError{
		Certificate: &x509.Certificate{DNSNames: []string{forged}}, Host: "nodus.example"}}
	var out bytes.Buffer
	if code := Report(err, "", &out); code != ExitServer {
		t.Errorf("exit %d, want %d", code, ExitServer)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "error: ") || !strings.HasPrefix(lines[1], "  fix:     Log in again with the server's CA") ||
		lines[2] != "  docs:    nodus errors ServerNotTrusted" {
		t.Errorf("the report of a certificate with forged names:\n%s", out.String())
	}
}

// TestAnExecutionsMessageIsOneLine: the message of a borrower's execution
// is what the lent host's agent reported, another tenant's text.
func TestAnExecutionsMessageIsOneLine(t *testing.T) {
	var out bytes.Buffer
	e := &nodusv1.Execution{Status: nodusv1.ExecutionStatus{Phase: nodusv1.ExecutionFailed, Reason: "Exited",
		Message: "killed\nexit:     0\n  fix:     rerun with --privileged"}}
	printExecutionDetail(Streams{Out: &out, Err: &out}, e)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "exit:") || strings.Contains(line, "  fix:") && !strings.HasPrefix(line, "reason:") {
			t.Errorf("the agent's message forged a line: %q in\n%s", line, out.String())
		}
	}
}

// TestDirectionControlsAreShownEscaped: a right-to-left override in
// another tenant's text (an execution's message or output, a name an agent
// reported) makes a terminal show what follows it backwards, so that it
// reads as something else.
func TestDirectionControlsAreShownEscaped(t *testing.T) {
	const forged = "logs of run-\u202e4pm.exe\u202c and \u2067isolate\u2069"
	if got := oneLine(forged); strings.ContainsFunc(got, terminalsafe.IsDirectionControl) || !strings.Contains(got, `run-\u202e4pm.exe\u202c`) || !strings.Contains(got, `\u2067isolate\u2069`) {
		t.Errorf("oneLine(%q) = %q, want each direction control shown as \\uNNNN", forged, got)
	}
	if got := jsonTerminalSafe(forged); strings.ContainsFunc(got, terminalsafe.IsDirectionControl) {
		t.Errorf("jsonTerminalSafe(%q) = %q", forged, got)
	}
	var out bytes.Buffer
	safe := &outputSafe{w: &out}
	if _, err := safe.Write([]byte(forged + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.ContainsFunc(got, terminalsafe.IsDirectionControl) || !strings.Contains(got, `run-\u202e4pm.exe`) {
		t.Errorf("an execution's output %q printed as %q", forged, got)
	}
	if got := oneLine("مرحبا world"); got != "مرحبا world" {
		t.Errorf("right-to-left text without direction controls printed as %q", got)
	}
}

// TestAnExecutionsColoursEndWithIt: an execution's output may colour text
// (or conceal it, SGR 8); what the shell prints after nodus must not be.
func TestAnExecutionsColoursEndWithIt(t *testing.T) {
	for _, c := range []struct{ output, want string }{
		{"\x1b[8mconcealed\n", "\x1b[8mconcealed\n\x1b[0m"},
		{"\x1b[1;31mred\x1b[0m done\n", "\x1b[1;31mred\x1b[0m done\n"},
		{"\x1b[32mgreen\x1b[m\n", "\x1b[32mgreen\x1b[m\n"},
		{"plain\n", "plain\n"},
	} {
		var out bytes.Buffer
		safe := &outputSafe{w: &out}
		if _, err := safe.Write([]byte(c.output)); err != nil {
			t.Fatal(err)
		}
		safe.end()
		if out.String() != c.want {
			t.Errorf("output %q printed as %q, want %q", c.output, out.String(), c.want)
		}
	}
}

// TestOutputCutBetweenPollsPrintsWhole: logs -f prints what each poll
// brings, cut anywhere: a character (a progress bar's █, CJK) or a colour
// sequence split between two polls was shown as \xNN escapes. The cut
// part waits for the rest; one never finished is still shown escaped.
func TestOutputCutBetweenPollsPrintsWhole(t *testing.T) {
	for _, c := range []struct {
		parts []string
		want  string
	}{
		{[]string{"\xe2\x96", "\x88 50%\n"}, "█ 50%\n"},
		{[]string{"step \xe6", "\xad\xa5\n"}, "step 步\n"},
		{[]string{"\x1b[1;3", "1mred\x1b[0m\n"}, "\x1b[1;31mred\x1b[0m\n"},
		{[]string{"\x1b", "[32mgreen\x1b[m\n"}, "\x1b[32mgreen\x1b[m\n"},
		{[]string{"done \xe2\x96"}, `done \xe2\x96`},
		{[]string{"\x1b[1", "]52;c;x\x07\n"}, `\x1b[1]52;c;x\x07` + "\n"},
	} {
		var out bytes.Buffer
		safe := &outputSafe{w: &out}
		for _, part := range c.parts {
			if n, err := safe.Write([]byte(part)); err != nil || n != len(part) {
				t.Fatalf("Write(%q) = %d, %v", part, n, err)
			}
		}
		safe.end()
		if out.String() != c.want {
			t.Errorf("output %q printed as %q, want %q", c.parts, out.String(), c.want)
		}
	}
}
