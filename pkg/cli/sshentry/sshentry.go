// Package sshentry writes what `nodus ssh` puts into the user's ssh_config
// and known_hosts, from values a server sent. A customer's machine trusts
// nothing of them it has not checked: the alias is computed here from the
// host's project and name, the address must be a plain host name or IP
// and a port, the login user a plain account name, the host key exactly
// one public key of an accepted type (written back in its canonical form),
// and local paths may not hold what ssh_config would read as tokens or
// quotes. Anything else is refused with an error that says which value.
package sshentry

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// Host is what the entry is made of.
type Host struct {
	Project, Name string // the ReservedHost's namespace and name, as the client asked for them
	Address       string // host:port from the certificate answer
	LoginUser     string // status.connect.loginUser
	HostKey       string // status.connect.hostKey, authorized_keys format
	// Local files.
	KnownHosts, IdentityFile, CertificateFile string
}

// Entry is a validated ssh_config block and known_hosts line.
type Entry struct {
	Alias  string
	Config string // the Host block
	// Options are the block's settings as ssh's -o arguments. On ssh's
	// command line they come before any config file's, so the host is
	// pinned even where the user's config does not include the block
	// where ssh reads it, or says otherwise for the alias first.
	Options    []string
	KnownHosts string // one line
}

var loginUser = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// Alias is the stable SSH alias of a host: NAME.PROJECT.nodus.
func Alias(project, name string) string { return name + "." + project + ".nodus" }

// CheckNames checks a host's project (a DNS label) and name (a DNS
// subdomain), which make its alias and the names of its files.
func CheckNames(project, name string) error {
	if errs := validation.IsDNS1123Label(project); len(errs) > 0 {
		return fmt.Errorf("project %q: %s", project, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("host name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// Make checks h and renders its entry.
func Make(h Host) (Entry, error) {
	if err := CheckNames(h.Project, h.Name); err != nil {
		return Entry{}, err
	}
	alias := Alias(h.Project, h.Name)
	hostName, port, err := sshvalue.ParseAddress(h.Address)
	if err != nil {
		return Entry{}, fmt.Errorf("the server sent SSH address %q: %w", h.Address, err)
	}
	key, err := CheckConnect(h.LoginUser, h.HostKey)
	if err != nil {
		return Entry{}, err
	}
	for what, path := range map[string]string{"known_hosts": h.KnownHosts, "identity": h.IdentityFile, "certificate": h.CertificateFile} {
		if err := CheckPath(path); err != nil {
			return Entry{}, fmt.Errorf("the %s file %q: %w", what, path, err)
		}
	}
	settings := [][2]string{{"HostName", hostName}, {"Port", fmt.Sprint(port)}, {"User", h.LoginUser}, {"HostKeyAlias", alias},
		{"UserKnownHostsFile", `"` + h.KnownHosts + `"`}, {"StrictHostKeyChecking", "yes"}, {"IdentitiesOnly", "yes"},
		{"IdentityFile", `"` + h.IdentityFile + `"`}, {"CertificateFile", `"` + h.CertificateFile + `"`},
		// The login account is the project's members' together: an agent
		// forwarded there serves them all (and anyone root on the host).
		// A "Host *" that forwards it does not reach this host; ssh -A
		// still does, asked for each time.
		{"ForwardAgent", "no"}, {"ForwardX11", "no"},
		// The host key is the one the server pins, in nodus' own block of
		// known_hosts: keys a host offers after login (a "Host *" with
		// UpdateHostKeys yes) would be added outside the block, and stay
		// trusted for the alias when the reservation moves to another machine.
		{"UpdateHostKeys", "no"},
		// And it alone vouches for the host: not a key the machine's
		// global known_hosts trusts (an @cert-authority line there for
		// every host), nor one DNS names (SSHFP), which a "Host *" may
		// turn on. /dev/null, not none: ssh before 8.5 reads "none" as a
		// file of the directory it runs in. (KnownHostsCommand stays: ssh
		// before 8.5 refuses the whole file for a setting it does not know.)
		{"GlobalKnownHostsFile", "/dev/null"}, {"VerifyHostKeyDNS", "no"}}
	config := "Host " + alias + "\n"
	options := make([]string, 0, len(settings))
	for _, kv := range settings {
		config += "  " + kv[0] + " " + kv[1] + "\n"
		options = append(options, kv[0]+"="+kv[1])
	}
	return Entry{Alias: alias, Config: config, Options: options, KnownHosts: alias + " " + key + "\n"}, nil
}

// CheckConnect checks the login user and host key a server sent for a
// host, and returns the key as known_hosts holds it.
func CheckConnect(user, hostKey string) (string, error) {
	if !loginUser.MatchString(user) {
		return "", fmt.Errorf("the server sent login user %q, which is no plain account name", user)
	}
	if user == "root" {
		// The API never names it (customers never log in as root), nor
		// does any agent serve it a principal.
		return "", fmt.Errorf("the server sent login user %q: customers never log in as root", user)
	}
	_, key, err := sshvalue.ParseKey(hostKey)
	if err != nil {
		return "", fmt.Errorf("the server sent host key %q: %w", hostKey, err)
	}
	return key, nil
}

// UnusablePathError is CheckPath's refusal: of a path of this machine's,
// not of anything a server sent.
type UnusablePathError struct{ problem string }

func (e *UnusablePathError) Error() string { return e.problem }

// CheckPath refuses a local path ssh_config cannot hold as one quoted
// argument naming that very file: a relative one (ssh resolves it against
// ~/.ssh, or the directory it runs in), quotes, control characters, '%'
// (ssh expands tokens), '$' (environment variables), '*', '?', '['
// (Include takes a pattern), or a leading '~'.
func CheckPath(path string) error {
	if !strings.HasPrefix(path, "/") {
		return &UnusablePathError{fmt.Sprintf("%q is not an absolute path", path)}
	}
	for _, r := range path {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`"%$*?[`, r) {
			return &UnusablePathError{fmt.Sprintf("holds %q, which ssh_config cannot take in a path", r)}
		}
	}
	return nil
}
