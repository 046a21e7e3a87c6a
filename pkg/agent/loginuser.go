package agent

import (
	"bufio"
	"fmt"
	"os"
	osuser "os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// loginDefs is where the system says which uids are people's.
const loginDefs = "/etc/login.defs"

// refuseLoginUser says why the agent must not let a tenant log in as user,
// whatever the server says: a name no login user may have (root), an
// account with uid 0 or below the system's first user uid (a system
// account: its processes are services, its home a system directory), or
// an account borrowers' executions run as. It returns nil for a user the
// agent may grant, including one that does not exist (nothing to grant).
func (a *Agent) refuseLoginUser(user string) error {
	if err := validation.CheckLoginUser(user); err != nil {
		return err
	}
	if a.runner != nil && slices.Contains(a.runner.Accounts(), user) {
		return fmt.Errorf("%q is an account borrowers' executions run as", user)
	}
	u, err := osuser.Lookup(user)
	if err != nil {
		return nil
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("%q has uid %q", user, u.Uid)
	}
	if first := firstUserUID(loginDefs); uid < first {
		return fmt.Errorf("%q is a system account (uid %d, below UID_MIN %d of %s)", user, uid, first, loginDefs)
	}
	return nil
}

// firstUserUID is UID_MIN in path, or 1000, useradd's default.
func firstUserUID(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 1000
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 2 && fields[0] == "UID_MIN" {
			if n, err := strconv.Atoi(fields[1]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 1000
}
