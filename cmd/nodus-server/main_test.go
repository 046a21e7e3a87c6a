package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs this test binary as nodus-server itself where a test asks
// for it, so that a test sees what the real command writes.
func TestMain(m *testing.M) {
	if os.Getenv("NODUS_SERVER_TEST_AS_SERVER") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestTheServerLogsControlCharactersAsText: the server's log holds names
// and messages that tenants and agents chose; klog wrote a value with a
// line break in it as it was, escape sequences included. The real command,
// failing on a data directory whose name carries them (a file there), logs them escaped.
func TestTheServerLogsControlCharactersAsText(t *testing.T) {
	// A file where the data directory would be: its creation fails.
	dataDir := filepath.Join(t.TempDir(), "data\n\x1b]0;owned\x07\rE1207 forged")
	if err := os.WriteFile(dataDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), "NODUS_SERVER_TEST_AS_SERVER=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("nodus-server started on a data directory that is a file:\n%s", stderr.String())
	}
	got := stderr.String()
	if !strings.Contains(got, "command failed") || !strings.Contains(got, `\x1b]0;owned\x07\x0dE1207 forged`) {
		t.Errorf("nodus-server did not log the directory's name, escaped:\n%q", got)
	}
	if strings.ContainsAny(got, "\x1b\x07\r") {
		t.Errorf("a control character reached nodus-server's log:\n%q", got)
	}
}
