package cleaning

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodus-dev/nodus/pkg/agent/sessions"
)

// ipcKinds are the System V IPC objects: each outlives every process, and
// the next tenant of the account, the same uid, could attach to what the
// last one left (a segment of its data, a queue of its messages).
var ipcKinds = []struct {
	file, idColumn string
	remove         func(id int) error
}{
	{"shm", "shmid", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
	{"msg", "msqid", func(id int) error {
		_, _, errno := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
		return errnoErr(errno)
	}},
	{"sem", "semid", func(id int) error {
		_, _, errno := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
		return errnoErr(errno)
	}},
}

func errnoErr(errno unix.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// removeIPC removes the System V IPC objects that the account owns or created, as
// listed under dir (/proc/sysvipc), and reports how many. An object gone
// meanwhile is not an error.
func removeIPC(dir string, owns sessions.OwnedBy) (int, error) {
	removed := 0
	for _, kind := range ipcKinds {
		ids, err := ipcObjectsOf(filepath.Join(dir, kind.file), kind.idColumn, owns)
		if err != nil {
			return removed, err
		}
		for _, id := range ids {
			err := kind.remove(id)
			switch {
			case err == nil:
				removed++
			case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIDRM):
				// removed since it was listed
			default:
				return removed, fmt.Errorf("removing %s %d: %w", kind.idColumn, id, err)
			}
		}
	}
	return removed, nil
}

// ipcObjectsOf reads one /proc/sysvipc table and returns the ids of the
// objects the account owns (uid) or created (cuid). The columns are found
// by the header's names; a missing table (no System V IPC) lists none.
func ipcObjectsOf(path, idColumn string, owns sessions.OwnedBy) ([]int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	if !lines.Scan() {
		return nil, lines.Err()
	}
	column := map[string]int{}
	for i, name := range strings.Fields(lines.Text()) {
		column[name] = i
	}
	idAt, ok1 := column[idColumn]
	uidAt, ok2 := column["uid"]
	cuidAt, ok3 := column["cuid"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("%s: no %s, uid and cuid columns in %q", path, idColumn, lines.Text())
	}
	var ids []int
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) <= max(idAt, uidAt, cuidAt) {
			continue
		}
		owner, err1 := strconv.Atoi(fields[uidAt])
		creator, err2 := strconv.Atoi(fields[cuidAt])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: uid %q, cuid %q", path, fields[uidAt], fields[cuidAt])
		}
		if !owns(owner) && !owns(creator) {
			continue
		}
		id, err := strconv.Atoi(fields[idAt])
		if err != nil {
			return nil, fmt.Errorf("%s: id %q: %w", path, fields[idAt], err)
		}
		ids = append(ids, id)
	}
	return ids, lines.Err()
}
