package executions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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

// workDir makes an execution's directory, dir, in the executions'
// directory: the borrower account's (cred) where it runs as one.
func (r *Runner) workDir(dir string, cred *syscall.Credential) error {
	if err := r.workRoot(); err != nil {
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

// workRoot makes the executions' directory, and checks that it is the
// agent's alone. Root sweeps it and makes the borrower accounts'
// directories in it: an account that could change what its path names (a
// symbolic link there or on its way, a directory on its way it can write
// or owns, the directory itself its own) could have root remove, or hand
// to a borrower account, whatever the path then pointed to.
func (r *Runner) workRoot() error {
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
	root := filepath.Clean(r.opts.WorkRoot)
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("the executions' directory %s (executionsDir, --executions-dir) "+format, append([]any{root}, args...)...)
	}
	if !filepath.IsAbs(root) || root == "/" {
		return refuse("is not an absolute path below /: name a directory of its own")
	}
	// The way is checked before anything is made on it, and again once
	// made.
	if err := trustedWay(root); err != nil {
		return refuse("%w", err)
	}
	if err := os.MkdirAll(filepath.Dir(root), mode); err != nil {
		return refuse("cannot be made: %w", err)
	}
	if err := trustedWay(root); err != nil {
		return refuse("%w", err)
	}
	if err := os.Mkdir(root, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return refuse("cannot be made: %w", err)
	}
	if info, err := os.Lstat(root); err != nil {
		return refuse("cannot be read: %w", err)
	} else if info.Mode()&fs.ModeSymlink != 0 {
		return refuse("is a symbolic link: set it to the directory's real path (readlink -f)")
	} else if !info.IsDir() {
		return refuse("is not a directory")
	}
	// Through a descriptor of the directory itself: the path could be
	// given another while an account still owned it.
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return refuse("cannot be opened as a directory of its own: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return refuse("cannot be read: %w", err)
	}
	euid := os.Geteuid()
	switch {
	case euid == 0 && (st.Uid != 0 || st.Gid != 0):
		// One an account made before the agent came: root's from now on.
		if err := unix.Fchown(fd, 0, 0); err != nil {
			return refuse("cannot be made root's: %w", err)
		}
	case euid != 0 && int(st.Uid) != euid:
		return refuse("is uid %d's, not the agent's (uid %d)", st.Uid, euid)
	}
	if err := unix.Fchmod(fd, uint32(mode)); err != nil {
		return refuse("cannot be made %o: %w", mode, err)
	}
	// Now root's, in a directory where no one else can rename it: the
	// path must still name it.
	var now unix.Stat_t
	if err := unix.Lstat(root, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return refuse("was replaced while it was made the agent's")
	}
	return nil
}

// trustedWay checks every directory above path that exists: a directory
// of its own (no symbolic link), owned by root or the agent, that no other
// account can write, unless sticky (as /tmp: others cannot rename or
// remove what is not theirs there). The first that does not exist must
// not be in a directory others can write, sticky or not: one could put a
// link there before the agent makes it.
func trustedWay(path string) error {
	euid := uint32(os.Geteuid())
	var way []string
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		way = append(way, dir)
		if dir == filepath.Dir(dir) {
			break
		}
	}
	openToOthers := false
	for _, dir := range slices.Backward(way) {
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); errors.Is(err, unix.ENOENT) {
			if openToOthers {
				return fmt.Errorf("is under %s, which does not exist, in a directory other accounts can write: make it first (root's, mode 755)", dir)
			}
			return nil // made by the agent, from here down
		} else if err != nil {
			return fmt.Errorf("cannot be checked: %s: %w", dir, err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return fmt.Errorf("goes through the symbolic link %s: set it to the directory's real path (readlink -f)", dir)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("is under %s, which is not a directory", dir)
		case st.Uid != 0 && st.Uid != euid:
			return fmt.Errorf("is under %s, which uid %d owns: only root may own the directories above it (chown root %s, or choose another)", dir, st.Uid, dir)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("is under %s, which accounts other than its owner can write (mode %o): only its owner may (chmod go-w %s), or make it sticky as /tmp is", dir, st.Mode&0o7777, dir)
		}
		openToOthers = st.Mode&0o022 != 0
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
