package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/cli/sshentry"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// SSHOptions are `nodus ssh`'s.
type SSHOptions struct {
	*Globals
	Streams
	ConfigOnly bool
	// Replace takes over an alias installed for another server's host.
	Replace bool
	// Home is the user's home, whose .ssh/config includes nodus' ssh config.
	Home string
}

func newSSHCommand(g *Globals, s Streams) *cobra.Command {
	o := &SSHOptions{Globals: g, Streams: s, Home: homeDir()}
	cmd := &cobra.Command{
		Use:   "ssh PROJECT/NAME [-- COMMAND...]",
		Short: "Open a shell (or run a command) on a reserved host with your system's ssh",
		Example: `  nodus ssh acme/gpu-001
  nodus ssh acme/gpu-001 -- nvidia-smi
  nodus ssh acme/gpu-001 --config-only && ssh gpu-001.acme.nodus`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeHosts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("output") {
				// ssh's own -o, taken for nodus' --output, would be lost.
				return usageError(fmt.Errorf("nodus ssh prints nothing to format, and takes no ssh options: to pass ssh options, run "+
					"nodus ssh %s --config-only, then ssh -o OPTION %s", args[0], sshAliasOf(args[0])))
			}
			return o.Run(cmd.Context(), args[0], args[1:])
		},
	}
	cmd.Flags().BoolVar(&o.ConfigOnly, "config-only", false, "install the SSH alias and credential, do not connect")
	cmd.Flags().BoolVar(&o.Replace, "replace", false, "take over the alias where it is installed for another server's host of the same project and name")
	return cmd
}

// sshAliasOf is the alias nodus ssh installs for ref, for a hint; ALIAS
// when ref is not a host's reference.
func sshAliasOf(ref string) string {
	project, name, err := splitRef(ref)
	if err != nil {
		return "ALIAS"
	}
	return sshentry.Alias(project, name)
}

// Run installs the alias, a pinned host key and a fresh certificate, then
// replaces itself with the system ssh.
func (o *SSHOptions) Run(ctx context.Context, ref string, command []string) error {
	_, h, err := o.host(ctx, ref)
	if err != nil {
		return err
	}
	// The host's names make file names: they are the ones asked for
	// (o.host checked), and valid names, before anything is written.
	project, name := h.Namespace, h.Name
	if err := sshentry.CheckNames(project, name); err != nil {
		return refuse(reasonAnswerRefused, fmt.Errorf("refusing to connect to %s: %w", ref, err))
	}
	if h.Status.Reservation.State != nodusv1.ReservationStateActive || h.Status.Connect == nil {
		why := "state " + oneLine(h.Status.Reservation.State)
		if c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected); c != nil {
			why += ", Connected " + oneLine(c.Status) + ": " + oneLine(c.Reason) + ", " + oneLine(c.Message)
		}
		return refuseWithFix(reasonHostNotConnectable, fmt.Errorf("%s has no access now (%s): nothing to connect to", ref, why),
			fmt.Sprintf("`nodus hosts get %s` shows the host's state and its Connected condition. A pending host is connectable from its start; one released or past its term is not any more; for a host that is active but not connected, ask your operator.", ref))
	}
	// Before any file is written: a refused answer must leave the
	// certificate of another server's alias (--replace) as it was.
	if _, err := sshentry.CheckConnect(h.Status.Connect.LoginUser, h.Status.Connect.HostKey); err != nil {
		return refuse(reasonAnswerRefused, fmt.Errorf("refusing to connect to %s/%s: %w", project, name, err))
	}
	dir := filepath.Join(DataDir(), "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// One nodus ssh at a time edits the key, the certificates and the
	// blocks: runs at once (a loop with &) would each write its own copy
	// of a file, and the last would drop the others' hosts.
	unlock, err := lockFiles(filepath.Join(dir, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	_, cfg, err := o.Client()
	if err != nil {
		return err
	}
	recordServer, err := claimAlias(dir, sshentry.Alias(project, name), cfg.Host, ref, o.Replace)
	if err != nil {
		return err
	}
	key, pub, err := userKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		return err
	}
	// "_" is in neither a project nor a host name: one file per host.
	certFile := filepath.Join(dir, project+"_"+name+"-cert.pub")
	address, err := o.certificate(ctx, h, pub, certFile)
	if err != nil {
		return err
	}
	// Nothing the server sent reaches a file unchecked.
	entry, err := sshentry.Make(sshentry.Host{Project: project, Name: name, Address: address,
		LoginUser: h.Status.Connect.LoginUser, HostKey: h.Status.Connect.HostKey,
		KnownHosts: filepath.Join(dir, "known_hosts"), IdentityFile: key, CertificateFile: certFile})
	if unusable := new(sshentry.UnusablePathError); errors.As(err, &unusable) {
		return err // this machine's own paths: nothing the server sent
	}
	if err != nil {
		return refuse(reasonAnswerRefused, fmt.Errorf("refusing to connect to %s/%s: %w", project, name, err))
	}
	alias := entry.Alias
	if err := replaceBlock(filepath.Join(dir, "known_hosts"), alias, entry.KnownHosts); err != nil {
		return err
	}
	sshConfig := filepath.Join(dir, "config")
	if err := replaceBlock(sshConfig, alias, entry.Config); err != nil {
		return err
	}
	if err := recordServer(); err != nil {
		return err
	}
	if err := includeFrom(filepath.Join(o.Home, ".ssh", "config"), sshConfig); err != nil {
		if o.ConfigOnly {
			return err
		}
		// nodus ssh gives ssh the host's settings itself; only a plain
		// `ssh ALIAS` needs the Include.
		fmt.Fprintf(o.Err, "warning: %s\n", terminalSafe(err.Error()))
	}
	unlock()
	if o.ConfigOnly {
		fmt.Fprintf(o.Out, "installed: ssh %s\n", alias)
		return nil
	}
	binary, err := exec.LookPath("ssh")
	if err != nil {
		return refuse(reasonSSHClientMissing, errors.New("the system ssh client is not installed"))
	}
	return syscall.Exec(binary, sshArgs(entry, o.Home, command), os.Environ())
}

// sshArgs is the ssh command line that reaches entry's host and runs
// command there.
func sshArgs(entry sshentry.Entry, home string, command []string) []string {
	args := []string{"ssh"}
	// ssh reads the config of the account's home, not $HOME; follow $HOME
	// as the rest of nodus does when the two differ.
	if u, err := user.Current(); err == nil && filepath.Clean(u.HomeDir) != filepath.Clean(home) {
		args = append(args, "-F", filepath.Join(home, ".ssh", "config"))
	}
	// The entry's own settings, before every config file's: the address,
	// user, pinned host key and certificate stay ours even where the
	// user's config does not include nodus' where ssh reads it (after a
	// Host line) or sets them for the alias first. Its other settings
	// (a ProxyJump, keep-alives) still apply.
	for _, option := range entry.Options {
		args = append(args, "-o", option)
	}
	// "--" ends ssh's options: ssh takes options after the host name too,
	// so a command word such as -oProxyCommand=… would otherwise be ssh's
	// own (a local command run, the host key unpinned).
	return append(append(args, "--", entry.Alias), command...)
}

// certificate returns the host's SSH address after making sure certFile
// holds a certificate for the host's current epoch with a minute to spare.
func (o *SSHOptions) certificate(ctx context.Context, h *nodusv1.ReservedHost, pub ssh.PublicKey, certFile string) (string, error) {
	meta := certFile + ".json"
	epoch := h.Status.Reservation.Epoch
	var cached certificateRecord
	if data, err := os.ReadFile(meta); err == nil && json.Unmarshal(data, &cached) == nil && cached.serves(h, time.Now()) {
		// Only a certificate of the key used now: one replaced by hand, or
		// by another run, has a certificate of its own to get.
		if data, err := os.ReadFile(certFile); err == nil {
			if cert, err := userCertificate(string(data), pub, cached.Principal); err == nil && validFor(cert, time.Minute) {
				return cached.Address, nil
			}
		}
	}
	c, _, err := o.Client()
	if err != nil {
		return "", err
	}
	answer, err := c.NodusV1().ReservedHosts(h.Namespace).SSHCertificate(ctx, h.Name,
		&nodusv1.ReservedHostSSHCertificate{PublicKey: string(ssh.MarshalAuthorizedKey(pub))}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if !sshvalue.IsPrincipalOf(answer.Principal, h.Name, epoch) {
		return "", refuse(reasonAnswerRefused, fmt.Errorf("refusing the SSH certificate the server signed for %s/%s: its principal %q is not one of %s at epoch %d",
			h.Namespace, h.Name, oneLine(answer.Principal), h.Name, epoch))
	}
	cert, err := userCertificate(answer.Certificate, pub, answer.Principal)
	if err != nil {
		return "", refuse(reasonAnswerRefused, fmt.Errorf("refusing the SSH certificate the server signed for %s/%s: %w", h.Namespace, h.Name, err))
	}
	// Not validFor: a certificate valid from the server's now may not be
	// yet by this clock, a little behind; one that expired is none.
	if cert.ValidBefore != ssh.CertTimeInfinity && cert.ValidBefore <= uint64(time.Now().Unix()) {
		return "", refuseWithFix(reasonAnswerRefused, fmt.Errorf("refusing the SSH certificate the server signed for %s/%s: it expired at %s",
			h.Namespace, h.Name, time.Unix(int64(cert.ValidBefore), 0).UTC().Format(time.RFC3339)),
			"Check this machine's clock (a certificate the server signed for an hour cannot have expired unless the clock is ahead); if it is right, tell your operator: the server's clock, or its answer, is wrong.")
	}
	// The address is kept beside the certificate and used for as long as
	// it is: checked before either is written.
	if _, _, err := sshvalue.ParseAddress(answer.Address); err != nil {
		return "", refuse(reasonAnswerRefused, fmt.Errorf("refusing to connect to %s/%s: the server sent SSH address %q: %w", h.Namespace, h.Name, oneLine(answer.Address), err))
	}
	if err := atomicfile.Write(certFile, ssh.MarshalAuthorizedKey(cert), 0o600); err != nil {
		return "", err
	}
	answer.Certificate = ""
	record := certificateRecord{ReservedHostSSHCertificate: *answer, Host: h.UID}
	if h.Status.Connect != nil {
		record.HostKey = h.Status.Connect.HostKey
	}
	data, _ := json.Marshal(record)
	return answer.Address, atomicfile.Write(meta, data, 0o600)
}

// certificateRecord is what the CLI keeps beside a certificate: the
// server's answer, and the ReservedHost it was issued for. A host deleted
// and made again under its name is another one, whose reservation's
// principal the cached certificate does not name. HostKey is the host key
// the host showed then: the kept address is of that machine.
type certificateRecord struct {
	nodusv1.ReservedHostSSHCertificate
	Host    types.UID `json:"reservedHostUID"`
	HostKey string    `json:"hostKey,omitempty"`
}

// serves says whether the kept certificate's record is one for host h as
// it is now: the same ReservedHost (a record without its UID, of an older
// nodus, or a host answered without one, is of no known host), the same
// host key (a node enrolled again, or another machine under its name, has
// an address of its own, which the record does not hold), its current
// principal, and a minute to spare.
func (r certificateRecord) serves(h *nodusv1.ReservedHost, now time.Time) bool {
	return r.Host != "" && r.Host == h.UID && h.Status.Connect != nil && r.HostKey == h.Status.Connect.HostKey &&
		sshvalue.IsPrincipalOf(r.Principal, h.Name, h.Status.Reservation.Epoch) &&
		r.ValidBefore != nil && r.ValidBefore.Time.Sub(now) > time.Minute
}

// validFor says whether cert itself is valid now and for at least d more:
// its own times, not what an answer said of them, are what sshd checks.
func validFor(cert *ssh.Certificate, d time.Duration) bool {
	now := time.Now()
	if cert.ValidAfter > uint64(now.Unix()) {
		return false
	}
	return cert.ValidBefore == ssh.CertTimeInfinity || cert.ValidBefore > uint64(now.Add(d).Unix())
}

// userCertificate parses text as the one user certificate of key for
// principal, which is what ssh will present.
func userCertificate(text string, key ssh.PublicKey, principal string) (*ssh.Certificate, error) {
	parsed, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	if err != nil {
		return nil, err
	}
	cert, ok := parsed.(*ssh.Certificate)
	switch {
	case !ok:
		return nil, fmt.Errorf("it is not a certificate but a %s key", parsed.Type())
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("it holds more than one key")
	case cert.CertType != ssh.UserCert:
		return nil, errors.New("it is not a user certificate")
	case !bytes.Equal(cert.Key.Marshal(), key.Marshal()):
		return nil, errors.New("it certifies another key than this laptop's")
	case !slices.Contains(cert.ValidPrincipals, principal):
		return nil, fmt.Errorf("it is not valid for %s", principal)
	}
	return cert, nil
}

// lockFiles holds an exclusive lock on path (made if need be) until the
// function it returns is called, once or more.
func lockFiles(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// userKey loads or creates the user's nodus SSH key.
func userKey(path string) (string, ssh.PublicKey, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return "", nil, err
		}
		block, err := ssh.MarshalPrivateKey(priv, "nodus")
		if err != nil {
			return "", nil, err
		}
		data = pem.EncodeToMemory(block)
		if err := atomicfile.Write(path, data, 0o600); err != nil {
			return "", nil, err
		}
	} else if err != nil {
		return "", nil, err
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return path, signer.PublicKey(), nil
}

const (
	beginMarker = "# nodus begin "
	endMarker   = "# nodus end "
)

// replaceBlock writes content between begin/end markers named id in path,
// replacing an earlier block of that id and keeping every other line.
func replaceBlock(path, id, content string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	block := beginMarker + id + "\n" + content + endMarker + id + "\n"
	text := string(old)
	if start := strings.Index(text, beginMarker+id+"\n"); start >= 0 {
		if end := strings.Index(text[start:], endMarker+id+"\n"); end >= 0 {
			text = text[:start] + block + text[start+end+len(endMarker+id+"\n"):]
			return atomicfile.Write(path, []byte(text), 0o600)
		}
	}
	return atomicfile.Write(path, []byte(text+block), 0o600)
}

// includeFrom makes the user's ssh config include nodus' one, at the top
// (Include must come before any Host), once, touching no other line.
func includeFrom(userConfig, included string) error {
	if err := os.MkdirAll(filepath.Dir(userConfig), 0o700); err != nil {
		return err
	}
	// A config that is a link (a dotfile manager's) stays one: the file it
	// names is the one written.
	if target, err := filepath.EvalSymlinks(userConfig); err == nil {
		userConfig = target
	}
	old, err := os.ReadFile(userConfig)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := sshentry.CheckPath(included); err != nil {
		return fmt.Errorf("nodus' ssh_config %q: %w", included, err)
	}
	block := beginMarker + "include\nInclude \"" + included + "\"\n" + endMarker + "include\n"
	text := string(old)
	if includes(text, included) {
		return nil
	}
	write := func(data []byte) error {
		err := atomicfile.Write(userConfig, data, 0o600)
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			// A configuration a dotfile manager keeps read-only (home-manager,
			// nix) takes the line from its owner's own source.
			return fmt.Errorf("%s cannot be written (%w): add this line at its top, where you keep it, and run nodus ssh again:\n  Include \"%s\"", userConfig, err, included)
		}
		return err
	}
	// An earlier nodus block (an older form, another path, or one that
	// came to stand after a Host line, where it applies to that host
	// only) is taken out, and the block goes at the top.
	if start := strings.Index(text, beginMarker+"include\n"); start >= 0 {
		if end := strings.Index(text[start:], endMarker+"include\n"); end >= 0 {
			text = text[:start] + text[start+end+len(endMarker+"include\n"):]
		}
	}
	return write([]byte(block + text))
}

// includes says whether an ssh_config text has a line of its own that
// includes path before any Host or Match (there, an Include applies to
// every host): a line its owner wrote, as a read-only configuration has it.
func includes(text, path string) bool {
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(strings.TrimSpace(line))
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		keyword := strings.ToLower(fields[0])
		if keyword == "host" || keyword == "match" {
			return false
		}
		if keyword == "include" && len(fields) == 2 && strings.Trim(fields[1], `"`) == path {
			return true
		}
	}
	return false
}
