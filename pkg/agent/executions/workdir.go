package executions

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// account resolves the borrower account. Running as it needs root, unless
// the agent itself runs as that account (a development setup).
func (r *Runner) account(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("the host has no borrower account %q", name)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return nil, fmt.Errorf("the borrower account %q is root: executions never run as root", name)
	}
	if r.opts.OwnerUsers != nil && slices.Contains(r.opts.OwnerUsers(), name) {
		return nil, fmt.Errorf("the borrower account %q is the host owner's login user: executions never run as the owner", name)
	}
	if os.Geteuid() == uid {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the host agent is not root and cannot run executions as %q", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func (r *Runner) workDir(dir string, cred *syscall.Credential) error {
	// Sandboxed, no account but root passes through the root: runc mounts
	// the directory as root, and what an execution leaves there (a file
	// it made setuid to the borrower account, which the sandbox's nosuid
	// mount does not stop on the host) is out of every other account's
	// reach, the owner's login user's included. Without a sandbox the
	// borrower account passes through to its own directory, and lists
	// nothing of the others.
	mode := os.FileMode(0o700)
	if r.opts.Sandbox == nil {
		mode = 0o711
	}
	if err := os.MkdirAll(r.opts.WorkRoot, mode); err != nil {
		return err
	}
	if r.opts.Sandbox != nil {
		// Root's, and no link to elsewhere: an account that owned it could
		// open it again.
		info, err := os.Lstat(r.opts.WorkRoot)
		if err != nil {
			return err
		}
		if !info.IsDir() {
			return fmt.Errorf("%s is not a directory of its own (a symbolic link?): the executions' directory must be root's", r.opts.WorkRoot)
		}
		if err := os.Lchown(r.opts.WorkRoot, 0, 0); err != nil {
			return err
		}
	}
	if err := os.Chmod(r.opts.WorkRoot, mode); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.Remove(dir)
			return err
		}
	}
	return nil
}

// lookPath finds name in the PATH executions get, not the agent's own.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(childPath) {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q is not found in %s", name, childPath)
}
