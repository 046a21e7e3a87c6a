package cli

import (
	"bytes"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
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
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "error: ") || !strings.HasPrefix(lines[1], "  fix:     The server's certificate") {
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
