package sessions

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// OwnedBy says whether a uid (a process's, a file's, an IPC object's) is
// the account's: its own, or one of its subordinate uids (/etc/subuid),
// which the user namespaces of its rootless containers map to, and which
// the next tenant of the account gets again.
type OwnedBy func(uid int) bool

// Owner is the OwnedBy of the account name, uid, with the subordinate uid
// ranges file lists for it (by name or uid). No file: its own uid only.
func Owner(file, name string, uid int) (OwnedBy, error) {
	ranges, err := subordinateRanges(file, name, uid)
	if err != nil {
		return nil, err
	}
	return func(u int) bool {
		if u == uid {
			return true
		}
		for _, r := range ranges {
			if u >= r[0] && u < r[0]+r[1] {
				return true
			}
		}
		return false
	}, nil
}

// subordinateRanges reads file (subuid(5): "name-or-uid:start:count" lines)
// for the ranges of name or uid, each as {start, count}.
func subordinateRanges(file, name string, uid int) ([][2]int, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ranges [][2]int
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		fields := strings.Split(line, ":")
		if line == "" || strings.HasPrefix(line, "#") || len(fields) != 3 || (fields[0] != name && fields[0] != strconv.Itoa(uid)) {
			continue
		}
		start, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil || start <= 0 || count <= 0 || start > 1<<32-1-count {
			return nil, fmt.Errorf("%s: the range of %s is %q", file, name, line)
		}
		ranges = append(ranges, [2]int{start, count})
	}
	return ranges, lines.Err()
}
