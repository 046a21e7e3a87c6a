package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// servePrincipals answers sshd's AuthorizedPrincipalsCommand (through
// `nodusd principals`) on a unix socket: the principals a login user may
// present now — one per reservation whose applied access grants it, named
// with the applied epoch. A certificate of any other epoch matches nothing.
func (a *Agent) servePrincipals(ctx context.Context, socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		logins := req.URL.Query()["user"]
		if len(logins) != 1 {
			return // no principal for a question that names no one account
		}
		login := logins[0]
		if a.refuseLoginUser(login) != nil {
			return // no principal: sshd lets nobody in as root, a service or a borrower
		}
		applied, err := a.store.All()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, acc := range applied {
			if acc.Granted() && acc.LoginUser == login && login != "" && !a.withheld(acc.Reservation) && a.claimed(acc) && len(utilvalidation.IsDNS1123Subdomain(acc.Reservation)) == 0 &&
				sshvalue.CanonicalUID(types.UID(acc.UID)) {
				fmt.Fprintln(w, sshvalue.Principal(acc.Reservation, types.UID(acc.UID), acc.Epoch))
			}
		}
	})}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "principals socket")
		return err
	}
	return nil
}

// Principals asks a running nodusd for the principals of login, as sshd's
// AuthorizedPrincipalsCommand does. Any failure prints nothing: no login.
func Principals(socket, login string, out io.Writer) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	// Escaped: sshd names the account as it is, and a name such as
	// "ubuntu#x" or "ub%75ntu" must not be read as "ubuntu".
	resp, err := client.Get("http://nodusd/principals?" + url.Values{"user": {login}}.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nodusd answered %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, strings.TrimSpace(string(body))+"\n")
	return err
}

// installUserCA writes the server's SSH user CA key where sshd's
// TrustedUserCAKeys reads it: exactly one key, in canonical form, since
// each key there is a CA sshd trusts for every login user.
func (a *Agent) installUserCA(ctx context.Context, path string) error {
	// Through the client's own HTTP client (its credential, its replicas),
	// not client-go's reading, which takes an answer whole, an error's too.
	rc, ok := a.client.NodusV1().RESTClient().(*rest.RESTClient)
	if !ok || rc.Client == nil {
		return errors.New("the API client has no HTTP client to read the SSH user CA with")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rc.Get().AbsPath("/ssh-user-ca.pub").URL().String(), nil)
	if err != nil {
		return err
	}
	resp, err := rc.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// No further than one key and its line break may take, whatever the
	// answer is: it is the server's.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, sshvalue.MaxKeyText+2))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the server answered %d for its SSH user CA: %q", resp.StatusCode, raw[:min(len(raw), 256)])
	}
	if len(raw) > sshvalue.MaxKeyText+1 {
		return fmt.Errorf("the server's SSH user CA is larger than %d bytes, which no public key is", sshvalue.MaxKeyText+1)
	}
	_, key, err := sshvalue.ParseKey(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("the server's SSH user CA: %w", err)
	}
	return atomicfile.Write(path, []byte(key+"\n"), 0o644)
}

// installDropIn writes the sshd configuration for Nodus access: trust the
// server's SSH user CA, ask this nodusd which principals are valid, and,
// for the login users Nodus manages (the login group), accept nothing but
// those certificates — no authorized_keys a tenant could plant, no password.
func (a *Agent) installDropIn() error {
	if a.opts.SSHDCAFile == "" {
		return errors.New("an sshd drop-in needs --sshd-ca-file")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Whole or not at all: a drop-in cut after its Match line would apply
	// sshd_config's later lines to the login group alone, and a partial
	// one would miss the certificate-only rules.
	return atomicfile.Write(a.opts.SSHDDropIn, []byte(DropIn(a.opts.SSHDCAFile, self, a.opts.Socket, a.opts.LoginGroup)), 0o644)
}

// DropIn is the sshd configuration nodusd installs. The Match block ends
// with "Match all" so that whatever the main sshd_config says after its
// Include applies to everyone, as before.
func DropIn(caFile, nodusd, socket, loginGroup string) string {
	return fmt.Sprintf(`# Written by nodusd: Nodus certificates log in while nodusd says so.
TrustedUserCAKeys %s
AuthorizedPrincipalsCommand %s principals --socket %s %%u
AuthorizedPrincipalsCommandUser root

# Login users of reservations (nodusd puts them in this group before it
# grants them access): Nodus certificates only.
Match Group %s
	AuthorizedKeysFile none
	AuthorizedKeysCommand none
	PasswordAuthentication no
	KbdInteractiveAuthentication no
	HostbasedAuthentication no
	GSSAPIAuthentication no
	AuthenticationMethods publickey
Match all
`, caFile, nodusd, socket, loginGroup)
}
