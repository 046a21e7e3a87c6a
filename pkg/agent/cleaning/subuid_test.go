package cleaning

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestACleaningRemovesWhatTheTenantsSubordinateUIDsLeft: an account with a
// range of subordinate uids (/etc/subuid: rootless containers' user
// namespaces) leaves files in the shared temporary directories owned by
// uids of that range; the next tenant of the account gets the same range.
// They go with the account's own; another range's stay.
func TestACleaningRemovesWhatTheTenantsSubordinateUIDsLeft(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the files are made for other uids (CI runs as root)")
	}
	s := newScratch(t)
	subuid := filepath.Join(s.root, "subuid")
	if err := os.WriteFile(subuid, []byte("someone:100000:65536\ntenant:165536:65536\n# a comment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cleaner.Paths.SubUIDFile = subuid
	for path, uid := range map[string]int{"tmp/container-left": 165536 + 1000, "tmp/.X11-unix/ns-left": 165536 + 65535, "tmp/someones": 100001} {
		if err := os.WriteFile(filepath.Join(s.root, path), []byte("data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(s.root, path), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.cleaner.Clean(context.Background(), 1, []string{"tenant"}, nil); r.Err != nil {
		t.Fatalf("clean: %v (steps %v)", r.Err, r.Steps)
	}
	for _, gone := range []string{"tmp/container-left", "tmp/.X11-unix/ns-left"} {
		if s.exists(gone) {
			t.Errorf("%s, of the tenant's subordinate uids, survived the cleaning", gone)
		}
	}
	if !s.exists("tmp/someones") {
		t.Error("a file of another account's subordinate uids was removed")
	}
}
