package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoginDefsThatCannotBeReadAreNoDefaults: the range of people's uids
// was useradd's defaults (1000 to 60000) whenever /etc/login.defs could
// not be read, not only where it is not there: on a host whose range
// starts higher, a service account between the two could be granted to a
// tenant. Only a file that is not there means the defaults now.
func TestLoginDefsThatCannotBeReadAreNoDefaults(t *testing.T) {
	dir := t.TempDir()
	defs := filepath.Join(dir, "login.defs")
	if err := os.WriteFile(defs, []byte("# people\nUID_MIN\t\t 2000\nUID_MAX\t\t 59999\nUID_MIN bogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path        string
		first, last int
		fails       bool
	}{
		{path: defs, first: 2000, last: 59999},
		{path: filepath.Join(dir, "missing"), first: 1000, last: 60000},
		{path: dir, fails: true}, // a directory: it cannot be read as the file
	} {
		first, last, err := userUIDs(c.path)
		if (err != nil) != c.fails || (!c.fails && (first != c.first || last != c.last)) {
			t.Errorf("%s: %d..%d, %v", c.path, first, last, err)
		}
	}
}
