// Package atomicfile writes files that readers see whole or not at all:
// the agent's credentials and state, the CLI's SSH configuration.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// Write writes data to path through a temporary file and a rename, so a
// reader never sees half a file. The data reaches the disk before the
// rename, and the rename before Write returns: after a power loss (a host
// cut off, a laptop's battery) the file is the old one or the new one,
// never the empty file a rename persisted ahead of its data leaves, which
// would stop nodusd (its certificate) or nodus ssh (its key) at their next
// start.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp")
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
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable, where the file system can: one
// that cannot sync a folder (EINVAL, ENOTSUP) has written the file anyway.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}
