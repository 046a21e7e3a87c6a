package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestartKeepsDataAndCredentials stops the server with SIGTERM and starts
// it again on the same data directory: the CA, the admin credential and the
// stored objects must all still be there.
func TestRestartKeepsDataAndCredentials(t *testing.T) {
	requireKubectl(t)
	dir := t.TempDir()
	first := startServer(t, dir)
	first.apply(t, "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: persisted}\n", "create")
	ca, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.stop(t); err != nil {
		t.Fatalf("SIGTERM must end nodus-server cleanly, got %v\n%s", err, first.stdout.String())
	}
	if !strings.Contains(first.stdout.String(), "Stopped listening") {
		t.Errorf("shutdown did not stop the API server first:\n%s", first.stdout.String())
	}

	second := startServer(t, dir)
	again, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil || !bytes.Equal(ca, again) {
		t.Errorf("the CA changed across a restart")
	}
	if out := second.must(t, "get", "pool", "persisted", "-o", "name"); strings.TrimSpace(out) != "pool.nodus.dev/persisted" {
		t.Errorf("pool lost across restart: %q", out)
	}
}
