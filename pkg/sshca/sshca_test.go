package sshca

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestACertificatePermitsNoX11Forwarding: a certificate lets its holder
// into an account the project's members share; a display forwarded there
// would be theirs to read.
func TestACertificatePermitsNoX11Forwarding(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Sign(sshPub, "id", "r-1@1", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := cert.Permissions.Extensions
	if _, ok := got["permit-X11-forwarding"]; ok {
		t.Errorf("the certificate permits X11 forwarding: %v", got)
	}
	for _, want := range []string{"permit-pty", "permit-port-forwarding", "permit-agent-forwarding"} {
		if _, ok := got[want]; !ok {
			t.Errorf("the certificate lacks %s: %v", want, got)
		}
	}
}
