package clusteridentity

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
)

// minKeyLength is the shortest cluster key accepted: a key that seals the
// CA must not be guessable.
const minKeyLength = 32

// ReadKeyFile reads a cluster key: the file's contents less surrounding
// white space, at least 32 bytes, in a file others cannot read.
func ReadKeyFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	if info.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("cluster key file %s is accessible to every user (mode %s): chmod o-rwx %s", path, info.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	key := bytes.TrimSpace(data)
	if len(key) < minKeyLength {
		return nil, fmt.Errorf("cluster key file %s holds %d bytes; a cluster key has at least %d (make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > %s)",
			path, len(key), minKeyLength, path)
	}
	return key, nil
}

// EnsureKeyFile creates path with a new random key (64 hex digits) unless
// it exists, and returns its key.
func EnsureKeyFile(path string) ([]byte, error) {
	if _, err := os.Stat(path); err == nil {
		return ReadKeyFile(path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, []byte(hex.EncodeToString(raw)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return ReadKeyFile(path)
}
