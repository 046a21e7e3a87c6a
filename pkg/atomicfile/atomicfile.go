// Package atomicfile writes files that readers see whole or not at all:
// the agent's credentials and state, the CLI's SSH configuration.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path through a temporary file and a rename, so a
// reader never sees half a file.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
