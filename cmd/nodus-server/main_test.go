package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodus-dev/nodus/pkg/safelogs/safelogstest"
)

func TestMain(m *testing.M) { safelogstest.Main(m, main) }

// TestTheServerLogsControlCharactersAsText: the server's log holds names
// and messages that tenants and agents chose; klog wrote a value with a
// line break in it as it was, escape sequences included. The real command,
// failing on a data directory whose name carries them (a file there), logs
// them escaped.
func TestTheServerLogsControlCharactersAsText(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data"+safelogstest.Forged)
	if err := os.WriteFile(dataDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	safelogstest.FailsLoggingAsText(t, "--data-dir", dataDir)
}
