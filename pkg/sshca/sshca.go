// Package sshca is the server's SSH user certificate authority: it signs
// short-lived user certificates whose one principal names a reservation and
// the epoch they were issued under, so that a host's sshd accepts them only
// while its agent has that epoch applied.
package sshca

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
)

// CA signs SSH user certificates.
type CA struct {
	signer ssh.Signer
	keyPEM []byte
	// PublicKey is the CA key in authorized_keys format, for TrustedUserCAKeys.
	PublicKey string
}

// LoadOrCreate reads the CA key at path (OpenSSH format), creating it on first use.
func LoadOrCreate(path string) (*CA, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if data, err = NewKey(); err != nil {
			return nil, err
		}
		if err := WriteKey(path, data); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	ca, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ca, nil
}

// NewKey makes a new CA key, in OpenSSH's PEM format.
func NewKey() ([]byte, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(key, "nodus ssh user ca")
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(block), nil
}

// WriteKey writes a CA key to path, 0600.
func WriteKey(path string, keyPEM []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, keyPEM, 0o600)
}

// Parse reads a CA key in OpenSSH's PEM format.
func Parse(keyPEM []byte) (*CA, error) {
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	return &CA{signer: signer, keyPEM: keyPEM, PublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))}, nil
}

// KeyPEM is the CA's private key, as Parse reads it.
func (ca *CA) KeyPEM() []byte { return ca.keyPEM }

// Sign certifies pub for one principal until validBefore.
func (ca *CA) Sign(pub ssh.PublicKey, keyID, principal string, validBefore time.Time) (*ssh.Certificate, error) {
	now := time.Now()
	cert := &ssh.Certificate{
		Key:             pub,
		CertType:        ssh.UserCert,
		KeyId:           keyID,
		ValidPrincipals: []string{principal},
		ValidAfter:      uint64(now.Add(-time.Minute).Unix()),
		ValidBefore:     uint64(validBefore.Unix()),
		// No X11 forwarding: a project's members share the login account
		// (and its ~/.Xauthority), so a display forwarded there would be
		// open to every other member, and to anyone root on the host, to
		// read and type into. Agent forwarding stays possible; nodus' SSH
		// entries turn it off unless the user asks (ssh -A).
		Permissions: ssh.Permissions{Extensions: extensions()},
	}
	if err := cert.SignCert(rand.Reader, ca.signer); err != nil {
		return nil, err
	}
	return cert, nil
}

// extensions are what a certificate permits: a terminal, port and agent
// forwarding, and ~/.ssh/rc; never X11 forwarding.
func extensions() map[string]string {
	return map[string]string{"permit-pty": "", "permit-port-forwarding": "", "permit-agent-forwarding": "", "permit-user-rc": ""}
}
