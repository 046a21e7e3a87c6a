package cleaning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// lastLogFile is where lastlog(8) keeps its records, a path built into it.
const lastLogFile = "/var/log/lastlog"

// clearLastLog clears name's record in shadow's lastlog: the time
// and the address of its last terminal login, which the next tenant of the
// account would be shown at its own ("Last login: … from …"). lastlog
// writes it: the record's layout is the C library's, which differs between
// architectures. A host without the file records no last login there; one
// with the file but no lastlog is said in the step, not a failed cleaning:
// the record tells where the tenant came from, and lets no one in.
func clearLastLog(ctx context.Context, name string) (string, error) {
	if _, err := os.Stat(lastLogFile); errors.Is(err, fs.ErrNotExist) {
		return "no " + lastLogFile + ": no last login recorded", nil
	} else if err != nil {
		return "", err
	}
	if _, err := exec.LookPath("lastlog"); err != nil {
		return "lastlog is not installed: the last login of " + name + " in " + lastLogFile + " was not cleared", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "lastlog", "--clear", "--user", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("lastlog --clear --user %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return "cleared the last login of " + name, nil
}
