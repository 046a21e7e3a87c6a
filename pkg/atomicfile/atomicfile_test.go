package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplacesWholeAndLeavesNothingBehind: the file holds the new
// data with its mode, no temporary file stays beside it, and a write that
// cannot happen (its folder is gone) leaves nothing. Whether the data
// reached the disk before the rename takes a power loss to see, which a
// test cannot make.
func TestWriteReplacesWholeAndLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.crt")
	for _, data := range []string{"first\n", "second, longer\n"} {
		if err := Write(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", info.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the folder holds %d entries, want the file alone: %v", len(entries), entries)
	}
	if err := Write(filepath.Join(dir, "gone", "x"), []byte("x"), 0o600); err == nil {
		t.Error("a write into a folder that does not exist succeeded")
	}
}
