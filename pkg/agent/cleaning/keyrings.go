package cleaning

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// removeKeys removes every key from the keyrings the kernel keeps for uid
// after its last process ended: its user keyring (for as long as the
// system runs), its user session keyring and its persistent keyring (for
// days). The next tenant of the account is the same uid and would find
// there what the last one kept (keyctl add user secret … @u). The user
// session keyring keeps its link to the user keyring, as the kernel made
// it, and both get the permissions it made them with back where the tenant
// changed them and kept the right to. It reports how many keys were
// removed; a kernel without keyrings has none.
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
		persistent = 0 // no persistent keyrings in this kernel
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
	// Given back first where the tenant locked them and kept the right to
	// set them, so that the kernel finds them by their special ids again:
	// found in /proc/keys instead, a keyring of the tenant's named like
	// one could be taken for it (and the real one removed with the rest).
	giveBackListed(fmt.Sprintf("_uid.%d", uid), fmt.Sprintf("_uid_ses.%d", uid))
	user, userLocked, err := existingKeyring(unix.KEY_SPEC_USER_KEYRING, fmt.Sprintf("_uid.%d", uid))
	if err != nil {
		return removed, fmt.Errorf("finding the user keyring: %w", err)
	}
	userSession, sessionLocked, err := existingKeyring(unix.KEY_SPEC_USER_SESSION_KEYRING, fmt.Sprintf("_uid_ses.%d", uid))
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
		giveBack(ring.id)
		n, err := unlinkAll(ring.id, ring.keep)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("emptying the %s keyring: %w", ring.name, err)
		}
	}
	if err := renewIfRestricted(user, userSession); err != nil {
		return removed, err
	}
	// What no keyring it could empty reached: keys in a keyring the tenant
	// locked, which a process of the uid still reads by their ids
	// (/proc/keys lists them to it).
	n, err := removeListedKeys([]int{persistent, user, userSession})
	removed += n
	if err != nil {
		return removed, err
	}
	locked := 0
	for _, l := range []bool{userLocked, sessionLocked} {
		if l {
			locked++
		}
	}
	return removed, noHiddenKeys(uid, []int{persistent, user, userSession}, locked)
}

// removeListedKeys invalidates (or revokes) every live key /proc/keys
// lists to this thread as its uid's, but for those of keep and the
// thread's own keyring, and reports how many. A key whose permissions
// allow neither (nor a change of them, which needs the right revoking
// does) fails the cleaning unless it goes within a moment (the session
// keyring of a process just ended, which the kernel frees a moment
// later): the uid may view it, so the next tenant reads its description
// at least, and whoever can make the keyring that holds it searchable
// again (its id guessed) possesses it.
func removeListedKeys(keep []int) (int, error) {
	thread, _ := unix.KeyctlGetKeyringID(unix.KEY_SPEC_THREAD_KEYRING, false)
	done := map[int]bool{}
	for deadline := time.Now().Add(keysSettle); ; time.Sleep(50 * time.Millisecond) {
		keys, err := listedKeys()
		if err != nil {
			return len(done), err
		}
		var left *listedKey
		for _, k := range keys {
			if k.id == thread || slices.Contains(keep, k.id) || done[k.id] || k.dead || k.processKeyring() {
				continue
			}
			if neutralize(k.id) {
				done[k.id] = true
			} else {
				left = &k
			}
		}
		if left == nil {
			return len(done), nil
		}
		if time.Now().After(deadline) {
			return len(done), fmt.Errorf("key %d (%s) of the tenant's stays: its permissions (%08x) let the cleaning neither invalidate nor revoke it, and the next tenant would find it: restart the host (which ends it), then clean the node again",
				left.id, left.kind, left.perm)
		}
	}
}

// keysSettle is how long the cleaning waits for the kernel to free the keys
// of processes just ended and the keys just unlinked.
var keysSettle = 10 * time.Second

// neutralize makes key id unreadable for good: invalidated (the kernel
// unlinks it everywhere; the right to search it) or revoked (the right to
// write it or to set its attributes).
func neutralize(id int) bool {
	if _, err := unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0); err == nil {
		return true
	}
	_, err := unix.KeyctlInt(unix.KEYCTL_REVOKE, id, 0, 0, 0)
	return err == nil
}

// noHiddenKeys fails while the uid owns more keys (/proc/key-users) than
// /proc/keys lists to it, with its special keyrings (known, and locked
// more whose ids it was refused): a key it may not view, which the
// cleaning cannot find, while a process that guesses its id may still read
// it. It waits a moment for the kernel to destroy the keys just unlinked.
func noHiddenKeys(uid int, known []int, locked int) error {
	var owned, listed int
	var err error
	for deadline := time.Now().Add(keysSettle); ; time.Sleep(50 * time.Millisecond) {
		// Counted before they are listed: a key the kernel destroys in
		// between is then in the count and not in the list, which the next
		// look clears, rather than in the list and not in the count, which
		// would hide a hidden key.
		if owned, err = ownedKeys(uid); err != nil {
			return err
		}
		keys, err := listedKeys()
		if err != nil {
			return err
		}
		listed = len(keys) + locked
		for _, id := range known {
			if id != 0 && !slices.ContainsFunc(keys, func(k listedKey) bool { return k.id == id }) {
				listed++ // a special keyring the uid may not view: emptied, or locked for good
			}
		}
		if owned <= listed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d keys of the tenant's are hidden from its own uid: the cleaning cannot find them, and the next tenant may, by guessing their ids: restart the host (which ends them), then clean the node again", owned-listed)
		}
	}
}

type listedKey struct {
	id                int
	perm              uint32
	kind, description string
	// dead: revoked, invalidated or expired, which no one reads again; the
	// kernel destroys it later (minutes later, for a revoked one).
	dead bool
}

// processKeyring says whether k is named as the kernel names a thread's,
// a process's or a session's keyring: those of the tenant's ended
// processes go with them (the kernel frees them a moment later), another
// thread's of the cleaning's is no tenant's, and one the tenant named so
// tells nothing but that name; what it holds is listed, and removed, on
// its own.
func (k listedKey) processKeyring() bool {
	return k.kind == "keyring" && (k.description == "_tid" || k.description == "_pid" || k.description == "_ses")
}

// listedKeys are the keys /proc/keys lists to this thread (those its uid
// may view) that its uid owns.
func listedKeys() ([]listedKey, error) {
	data, err := os.ReadFile("/proc/keys")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	uid := strconv.Itoa(unix.Getuid())
	var keys []listedKey
	for _, line := range strings.Split(string(data), "\n") {
		// ID FLAGS USAGE EXPIRY PERM UID GID TYPE DESCRIPTION: SUMMARY
		f := strings.Fields(line)
		if len(f) < 9 || f[5] != uid {
			continue
		}
		id, err := strconv.ParseInt(f[0], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("/proc/keys lists key %q", f[0])
		}
		perm, err := strconv.ParseUint(f[4], 16, 32)
		if err != nil {
			return nil, fmt.Errorf("/proc/keys lists key %q with permissions %q", f[0], f[4])
		}
		keys = append(keys, listedKey{id: int(id), perm: uint32(perm), kind: f[7], description: strings.TrimSuffix(f[8], ":"),
			dead: strings.ContainsAny(f[1], "RDi") || f[3] == "expd"})
	}
	return keys, nil
}

// keyedUIDs are the uids /proc/key-users counts keys of: all of them, to
// root; none where the kernel keeps no keyrings.
func keyedUIDs() ([]int, error) {
	data, err := os.ReadFile("/proc/key-users")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var uids []int
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		uid, err := strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		if err != nil {
			return nil, fmt.Errorf("/proc/key-users counts keys of %q", f[0])
		}
		uids = append(uids, uid)
	}
	return uids, nil
}

// ownedKeys is how many keys uid owns, as /proc/key-users counts them.
func ownedKeys(uid int) (int, error) {
	data, err := os.ReadFile("/proc/key-users")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		// "  UID:  usage nkeys/nikeys qnkeys/maxkeys qnbytes/maxbytes"
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == strconv.Itoa(uid)+":" {
			n, err := strconv.Atoi(strings.Split(f[2], "/")[0])
			if err != nil {
				return 0, fmt.Errorf("/proc/key-users counts %q keys of uid %d", f[2], uid)
			}
			return n, nil
		}
	}
	return 0, nil
}

// keyringPerm is what the kernel gives a user keyring and a user session
// keyring when it makes them (look_up_user_keyrings): every right to their
// uid, every right but that to set their attributes to their possessor.
const keyringPerm = 0x1f3f0000

// giveBack gives keyring id the permissions and the lifetime (none) the
// kernel makes a user or user session keyring with, where the tenant
// changed them and kept the right to: a keyring it locked would stay
// locked for the next tenant of the account, one it left unwritable would
// fail the cleaning, one it set to expire would expire in the next
// tenant's time. Where it kept no such right the keyring stays as it is,
// and what is left in it is judged on its own.
func giveBack(id int) {
	_ = unix.KeyctlSetperm(id, keyringPerm)
	_, _ = unix.KeyctlInt(unix.KEYCTL_SET_TIMEOUT, id, 0, 0, 0)
}

// renewIfRestricted links the user keyring into the user session keyring
// again, as the kernel made them (a tenant may have unlinked it, or linked
// a keyring of its own named like it, which displaces the link). A keyring
// the tenant restricted (keyctl restrict_keyring) takes no link, and no
// key, again for as long as it lives, which no right undoes: then both are
// invalidated, and the kernel makes them anew when the uid next asks for
// them. One that cannot be fails the cleaning. Keyrings it cannot write (a
// tenant's lock without the right to set it) are judged elsewhere.
func renewIfRestricted(user, userSession int) error {
	if user == 0 {
		return nil
	}
	// The cleaning's own thread keyring, linked in and out again: linked
	// only if the user keyring takes links.
	_, err := unix.KeyctlInt(unix.KEYCTL_LINK, unix.KEY_SPEC_THREAD_KEYRING, user, 0, 0)
	restricted := errors.Is(err, unix.EPERM)
	if err == nil {
		if _, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, unix.KEY_SPEC_THREAD_KEYRING, user, 0, 0); err != nil {
			return fmt.Errorf("unlinking the cleaning's own keyring from the user keyring: %w", err)
		}
	}
	if !restricted && userSession != 0 {
		_, err := unix.KeyctlInt(unix.KEYCTL_LINK, user, userSession, 0, 0)
		restricted = errors.Is(err, unix.EPERM)
	}
	if !restricted {
		return nil
	}
	for _, id := range []int{user, userSession} {
		if id == 0 {
			continue
		}
		if _, err := unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0); err != nil && !errors.Is(err, unix.ENOKEY) {
			return fmt.Errorf("the tenant restricted its keyrings (keyctl restrict_keyring: no key may be added to them again while they live), and keyring %d cannot be invalidated: %w: restart the host (which ends it), then clean the node again", id, err)
		}
	}
	return nil
}

// giveBackListed gives back (giveBack) every keyring /proc/keys lists to
// this thread as its uid's under one of names: the special one, and any of
// the tenant's own named like it, which are emptied or removed after.
func giveBackListed(names ...string) {
	keys, err := listedKeys()
	if err != nil {
		return // read again, and failed on, where it counts
	}
	for _, k := range keys {
		if k.kind == "keyring" && !k.dead && slices.Contains(names, k.description) {
			giveBack(k.id)
		}
	}
}

// existingKeyring is the id of the special keyring, named description. The
// kernel finds it (or makes it) only while the user keyring is searchable:
// a tenant may have taken every permission on that away (keyctl setperm @u
// 0), and the user session keyring is then found in /proc/keys (what this
// thread may view). 0: the uid has none, and none can be made for it (its
// key quota is full: so it had none, and nothing in it to remove), or it
// is locked: refused, and not listed (no right to view it left).
func existingKeyring(special int, description string) (id int, locked bool, err error) {
	id, err = unix.KeyctlGetKeyringID(special, true)
	if !errors.Is(err, unix.ENOKEY) && !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.EACCES) {
		return id, false, err
	}
	// Asked to make it where there is none, the kernel refuses one that
	// exists (ENOKEY for a user keyring locked for good, EACCES).
	refused := errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOKEY)
	id, err = listedKeyring(description)
	return id, refused && id == 0 && err == nil, err
}

// listedKeyring finds the keyring named description, of this thread's uid,
// in /proc/keys; 0 when it lists none.
func listedKeyring(description string) (int, error) {
	keys, err := listedKeys()
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if k.kind == "keyring" && k.description == description {
			return k.id, nil
		}
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
