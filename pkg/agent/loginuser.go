package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osuser "os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// loginDefs is where the system says which uids are people's.
const loginDefs = "/etc/login.defs"

// errAccountUnreadable refuses a user the account database could not say
// anything of (passwd unreadable, a directory service that does not
// answer): it may be a system account, so its access is not granted until
// it can be looked up (retryRefusals); it may be a tenant's, so it is not
// taken for a service's either (neverATenants).
var errAccountUnreadable = errors.New("the account cannot be looked up")

// refuseLoginUser says why the agent must not let a tenant log in as user,
// whatever the server says: a name no login user may have (root), an
// account with a uid outside the system's range of people's uids (a
// system account: its processes are services, its home a system
// directory), an account borrowers' executions run as, or one that cannot
// be looked up (errAccountUnreadable). It returns nil for a user the
// agent may grant, including one that does not exist (nothing to grant).
func (a *Agent) refuseLoginUser(user string) error {
	if err := validation.CheckLoginUser(user); err != nil {
		return err
	}
	if a.runner != nil && slices.Contains(a.runner.Accounts(), user) {
		return fmt.Errorf("%q is an account borrowers' executions run as", user)
	}
	u, err := a.lookupUser(user)
	var unknown osuser.UnknownUserError
	if errors.As(err, &unknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%q: %w: %v", user, errAccountUnreadable, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("%q has uid %q", user, u.Uid)
	}
	first, last, err := userUIDs(loginDefs)
	if err != nil {
		// Perhaps a system account, perhaps a tenant's: as an account
		// that cannot be looked up.
		return fmt.Errorf("%q: %w: the range of people's uids, %s: %v", user, errAccountUnreadable, loginDefs, err)
	}
	if uid < first {
		return fmt.Errorf("%q is a system account (uid %d, below UID_MIN %d of %s)", user, uid, first, loginDefs)
	}
	if uid > last {
		// nobody (65534), systemd's dynamic users (61184–65519): no one's.
		return fmt.Errorf("%q is a system account (uid %d, above UID_MAX %d of %s)", user, uid, last, loginDefs)
	}
	return nil
}

// neverATenants says whether user is an account no tenant is ever let in
// as (refuseLoginUser): its processes are a service's, not sessions to
// count or end. One that cannot be looked up may be a tenant's: its
// sessions count (as at least one, while they cannot be counted).
func (a *Agent) neverATenants(user string) bool {
	err := a.refuseLoginUser(user)
	return err != nil && !errors.Is(err, errAccountUnreadable)
}

// lookupUser finds an account as the agent's process listing does
// (sessions.Procs.Lookup; user.Lookup by default).
func (a *Agent) lookupUser(name string) (*osuser.User, error) {
	if a.procs.Lookup != nil {
		return a.procs.Lookup(name)
	}
	return osuser.Lookup(name)
}

// userUIDs are UID_MIN and UID_MAX in path, the uids of people's accounts;
// useradd's defaults, 1000 and 60000, where it does not say or is not
// there. A file that cannot be read is an error: its range may be another.
func userUIDs(path string) (first, last int, err error) {
	first, last = 1000, 60000
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return first, last, nil
	}
	if err != nil {
		return 0, 0, err
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
	if err := s.Err(); err != nil {
		return 0, 0, err
	}
	return first, last, nil
}
