package cleaning

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
)

// clearLastLog clears name's record in file, shadow's lastlog: the time and
// the address of its last terminal login, which the next tenant of the
// account would be shown at its own ("Last login: … from …"). lastlog
// writes it: the record's layout is the C library's, which differs between
// architectures. A lastlog that is missing or fails is said in the step,
// not a failed cleaning: the record tells where the tenant came from, as
// wtmp does (which the cleaning leaves whole), and lets no one in.
func clearLastLog(ctx context.Context, file, name string) string {
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return "no " + file + ": no last login recorded there (lastlog2's and wtmpdb's databases are not looked at)"
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "lastlog", "--clear", "--user", name).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("the last login of %s in %s was not cleared (lastlog --clear --user %s: %v: %s)",
			name, file, name, err, strings.TrimSpace(string(out)))
	}
	return "cleared the last login of " + name
}
