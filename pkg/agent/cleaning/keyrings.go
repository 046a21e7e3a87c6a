package cleaning

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// removeKeys removes every key from the keyrings the kernel keeps for uid
// after its last process ended: its user keyring (for as long as the
// system runs), its user session keyring and its persistent keyring (for
// days). The next tenant of the account is the same uid and would find
// there what the last one kept (keyctl add user secret … @u). The user
// session keyring keeps its link to the user keyring, as the kernel made
// it. It reports how many keys were removed; a kernel without keyrings has
// none.
//
// Key permissions do not yield to root: the work is done as uid, on a
// thread of its own that never runs anything else.
func removeKeys(uid int) (int, error) {
	type result struct {
		removed int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread, which the runtime never ends: as uid, it
			// would leave the whole process signalled (kill -1 of the
			// tenant's next sweep) and owned as uid. Another thread does
			// the work; this goroutine holds the main thread meanwhile,
			// so that one is not it.
			n, err := removeKeys(uid)
			runtime.UnlockOSThread()
			done <- result{n, err}
			return
		}
		// Never unlocked from here on: the runtime ends this thread with
		// the goroutine, so no other goroutine ever runs as uid. The raw
		// system call changes this thread's credentials only (Go's
		// own changes every thread's); with all three ids uid's, the thread
		// has no capability left.
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
			done <- result{err: fmt.Errorf("taking on uid %d: %w", uid, errno)}
			return
		}
		n, err := removeOwnKeys()
		done <- result{n, err}
	}()
	r := <-done
	return r.removed, r.err
}

// removeOwnKeys empties the calling thread's persistent keyring, user
// keyring and user session keyring (but for its link to the user keyring).
//
// It makes no key the uid's quota is charged for: a tenant may have used
// all of it. The persistent keyring comes first, linked into the thread's
// own keyring (which the kernel makes beyond the quota, and which ends
// with the thread); a user or user session keyring that cannot be made is
// one the uid never had: a keyring that exists is found without a key made.
func removeOwnKeys() (int, error) {
	removed := 0
	persistent, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, -1, unix.KEY_SPEC_THREAD_KEYRING, 0, 0)
	switch {
	case errors.Is(err, unix.ENOSYS):
		return 0, nil // no keyrings in this kernel: nothing kept
	case errors.Is(err, unix.EOPNOTSUPP):
		// no persistent keyrings in this kernel
	case err != nil:
		return 0, fmt.Errorf("finding the persistent keyring: %w", err)
	default:
		n, err := unlinkAll(persistent, 0)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("emptying the persistent keyring: %w", err)
		}
	}
	uid := unix.Getuid() // this thread's
	user, err := existingKeyring(unix.KEY_SPEC_USER_KEYRING, fmt.Sprintf("_uid.%d", uid))
	if err != nil {
		return removed, fmt.Errorf("finding the user keyring: %w", err)
	}
	userSession, err := existingKeyring(unix.KEY_SPEC_USER_SESSION_KEYRING, fmt.Sprintf("_uid_ses.%d", uid))
	if err != nil {
		return removed, fmt.Errorf("finding the user session keyring: %w", err)
	}
	for _, ring := range []struct {
		name     string
		id, keep int
	}{{"user", user, 0}, {"user session", userSession, user}} {
		if ring.id == 0 {
			continue
		}
		n, err := unlinkAll(ring.id, ring.keep)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("emptying the %s keyring: %w", ring.name, err)
		}
	}
	return removed, nil
}

// existingKeyring is the id of the special keyring, named description. The
// kernel finds it (or makes it) only while the user keyring is searchable:
// a tenant may have taken every permission on that away (keyctl setperm @u
// 0), and the user session keyring is then found in /proc/keys (what this
// thread may view). 0: the uid has none, and none can be made for it (its
// key quota is full: so it had none, and nothing in it to remove).
func existingKeyring(special int, description string) (int, error) {
	id, err := unix.KeyctlGetKeyringID(special, true)
	if !errors.Is(err, unix.ENOKEY) && !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.EACCES) {
		return id, err
	}
	return listedKeyring(description)
}

// listedKeyring finds the keyring named description, of this thread's uid,
// in /proc/keys; 0 when it lists none.
func listedKeyring(description string) (int, error) {
	data, err := os.ReadFile("/proc/keys")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	uid := strconv.Itoa(unix.Getuid())
	for _, line := range strings.Split(string(data), "\n") {
		// ID FLAGS USAGE EXPIRY PERM UID GID TYPE DESCRIPTION: SUMMARY
		f := strings.Fields(line)
		if len(f) < 9 || f[5] != uid || f[7] != "keyring" || f[8] != description+":" {
			continue
		}
		id, err := strconv.ParseInt(f[0], 16, 32)
		if err != nil {
			return 0, fmt.Errorf("/proc/keys lists key %q", f[0])
		}
		return int(id), nil
	}
	return 0, nil
}

// unlinkAll unlinks every key of keyring ring but keep (0: none), and
// reports how many. A key (or a keyring, with what it holds) that no
// keyring links any more is destroyed by the kernel.
func unlinkAll(ring, keep int) (int, error) {
	ids, err := keyringContents(ring)
	if errors.Is(err, unix.EACCES) {
		// Locked by the tenant against its own uid: the next tenant, the
		// same uid, cannot reach anything through it either.
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if id == keep {
			continue
		}
		_, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, id, ring, 0, 0)
		switch {
		case err == nil:
			n++
		case !errors.Is(err, unix.ENOENT): // ENOENT: unlinked since it was listed
			return n, fmt.Errorf("unlinking key %d: %w", id, err)
		}
	}
	return n, nil
}

// keyringContents lists the ids of the keys keyring ring links.
func keyringContents(ring int) ([]int, error) {
	size, err := unix.KeyctlBuffer(unix.KEYCTL_READ, ring, nil, 0)
	if err != nil {
		return nil, err
	}
	for {
		buf := make([]byte, size)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, ring, buf, 0)
		if err != nil {
			return nil, err
		}
		if n > len(buf) {
			size = n // links were added meanwhile
			continue
		}
		ids := make([]int, 0, n/4)
		for i := 0; i+4 <= n; i += 4 {
			ids = append(ids, int(int32(binary.NativeEndian.Uint32(buf[i:]))))
		}
		return ids, nil
	}
}
