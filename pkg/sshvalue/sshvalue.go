// Package sshvalue checks the SSH values that cross a trust boundary: a
// host's address and host key, which an agent reports and a customer's
// laptop writes into ssh_config and known_hosts, and the public keys users
// ask the server to certify. The server checks them where an agent writes
// them, and the CLI checks them again where it writes them: neither side
// trusts the other to have done it.
package sshvalue

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxKeyText bounds a public key in authorized_keys form: an RSA key of
// MaxRSABits takes about 2.8 KiB, so 8 KiB leaves room for a comment.
const MaxKeyText = 8 << 10

// RSA keys must have at least MinRSABits (OpenSSH's own floor is 1024;
// 2048 is what NIST and OpenSSH's ssh-keygen default ask today) and at
// most MaxRSABits (OpenSSH refuses larger ones too).
const (
	MinRSABits = 2048
	MaxRSABits = 16384
)

// AcceptedKeyTypes are the public key types accepted as host keys and for
// user certificates: what OpenSSH 8.x and later offer by default.
var AcceptedKeyTypes = map[string]bool{
	ssh.KeyAlgoED25519: true, ssh.KeyAlgoECDSA256: true, ssh.KeyAlgoECDSA384: true, ssh.KeyAlgoECDSA521: true,
	ssh.KeyAlgoRSA: true, ssh.KeyAlgoSKED25519: true, ssh.KeyAlgoSKECDSA256: true,
}

// ParseAddress accepts host:port with a DNS host name or an IP address and
// a port from 1 to 65535, nothing else: no whitespace, no control
// characters, no user part.
func ParseAddress(address string) (host string, port int, err error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		// What net found wrong, not its whole error, which repeats the
		// address as it came, line breaks and all: its caller prints it on
		// a terminal.
		var addrErr *net.AddrError
		if errors.As(err, &addrErr) {
			return "", 0, errors.New(addrErr.Err)
		}
		return "", 0, errors.New("it is not HOST:PORT")
	}
	port, err = strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portText {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", portText)
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), port, nil
	}
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(errs) > 0 {
		return "", 0, fmt.Errorf("%q is neither an IP address nor a DNS name", host)
	}
	return host, port, nil
}

// ParseKey parses exactly one public key of an accepted type and size in
// authorized_keys form, with no options and at most a one-line comment,
// and returns it with its canonical form ("TYPE BASE64", no comment).
func ParseKey(text string) (ssh.PublicKey, string, error) {
	if len(text) > MaxKeyText {
		return nil, "", fmt.Errorf("it is %d bytes long; a public key takes at most %d", len(text), MaxKeyText)
	}
	key, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	switch {
	case err != nil:
		return nil, "", err
	case len(options) > 0:
		return nil, "", errors.New("it carries options")
	case len(strings.TrimSpace(string(rest))) > 0:
		return nil, "", errors.New("it holds more than one key")
	case strings.ContainsAny(comment, "\r\n"):
		return nil, "", errors.New("its comment spans lines")
	case !AcceptedKeyTypes[key.Type()]:
		return nil, "", fmt.Errorf("key type %s is not accepted", key.Type())
	}
	if bits, ok := rsaBits(key); ok && (bits < MinRSABits || bits > MaxRSABits) {
		return nil, "", fmt.Errorf("an RSA key of %d bits is not accepted: use %d to %d bits, or ed25519", bits, MinRSABits, MaxRSABits)
	}
	return key, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), nil
}

// CheckCanonicalHostKey accepts exactly one public key of an accepted type
// in canonical form: what an agent reports as its host key.
func CheckCanonicalHostKey(text string) error {
	_, canonical, err := ParseKey(text)
	if err != nil {
		return err
	}
	if canonical != text {
		return errors.New(`it is not in canonical form "TYPE BASE64" (no comment, single spaces, no line end)`)
	}
	return nil
}

func rsaBits(key ssh.PublicKey) (int, bool) {
	ck, ok := key.(ssh.CryptoPublicKey)
	if !ok {
		return 0, false
	}
	pub, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
	if !ok {
		return 0, false
	}
	return pub.N.BitLen(), true
}

// Principal names one reservation object at an epoch: the one principal an
// SSH certificate is signed for and the agent lets in. The name and the
// epoch alone would not do: a reservation deleted and made again under its
// name, perhaps for another project, starts its epochs anew, and a
// certificate of the first must not open the second. The UID makes them
// two principals.
func Principal(reservation string, uid types.UID, epoch int64) string {
	return principalPrefix(reservation, epoch) + string(uid)
}

// IsPrincipalOf says whether principal is the Principal of reservation at
// epoch for some UID in canonical form: what a laptop, which knows a
// reservation's name and epoch but not its UID, can check of a certificate
// the server gives it.
func IsPrincipalOf(principal, reservation string, epoch int64) bool {
	uid, ok := strings.CutPrefix(principal, principalPrefix(reservation, epoch))
	return ok && CanonicalUID(types.UID(uid))
}

func principalPrefix(reservation string, epoch int64) string {
	return fmt.Sprintf("nodus-%s-epoch-%d-", reservation, epoch)
}

// CanonicalUID says whether uid is what the API server makes: a UUID, in
// lower case, 8-4-4-4-12. Nothing else may become part of a principal.
func CanonicalUID(uid types.UID) bool {
	id, err := uuid.Parse(string(uid))
	return err == nil && id.String() == string(uid)
}
