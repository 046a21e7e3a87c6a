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
// account with a uid outside the system's range of people's uids (a
// system account: its processes are services, its home a system
// directory), or
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
	first, last := userUIDs(loginDefs)
	if uid < first {
		return fmt.Errorf("%q is a system account (uid %d, below UID_MIN %d of %s)", user, uid, first, loginDefs)
	}
	if uid > last {
		// nobody (65534), systemd's dynamic users (61184–65519): no one's.
		return fmt.Errorf("%q is a system account (uid %d, above UID_MAX %d of %s)", user, uid, last, loginDefs)
	}
	return nil
}

// userUIDs are UID_MIN and UID_MAX in path, the uids of people's accounts;
// useradd's defaults, 1000 and 60000, where it does not say.
func userUIDs(path string) (first, last int) {
	first, last = 1000, 60000
	f, err := os.Open(path)
	if err != nil {
		return first, last
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) != 2 {
			continue
		}
		n, err := strconv.Atoi(fields[1])
		if err != nil || n <= 0 {
			continue
		}
		switch fields[0] {
		case "UID_MIN":
			first = n
		case "UID_MAX":
			last = n
		}
	}
	return first, last
}
