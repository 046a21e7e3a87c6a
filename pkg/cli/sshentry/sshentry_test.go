package sshentry

import (
	"encoding/base64"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

const goodKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXxFgGqQ8L9Y2pGk6n2V3p5cS0m4Cq5ZrM0tBq2mB7e"

func host() Host {
	return Host{Project: "acme", Name: "gpu-001", Address: "203.0.113.10:22", LoginUser: "ubuntu", HostKey: goodKey + " root@gpu-001",
		KnownHosts: "/home/me/.config/nodus/ssh/known_hosts", IdentityFile: "/home/me/.config/nodus/ssh/id_ed25519",
		CertificateFile: "/home/me/.config/nodus/ssh/acme-gpu-001-cert.pub"}
}

// TestServerValuesAreChecked attacks the writer with what a compromised or
// buggy server could send, as issue 12 found it did.
func TestServerValuesAreChecked(t *testing.T) {
	e, err := Make(host())
	if err != nil {
		t.Fatal(err)
	}
	if e.Alias != "gpu-001.acme.nodus" || e.KnownHosts != "gpu-001.acme.nodus "+goodKey+"\n" || !strings.Contains(e.Config, "  HostName 203.0.113.10\n  Port 22\n  User ubuntu\n") {
		t.Errorf("entry: %+v", e)
	}
	if e6, err := Make(func() Host { h := host(); h.Address = "[2001:db8::1]:2222"; return h }()); err != nil || !strings.Contains(e6.Config, "HostName 2001:db8::1\n  Port 2222\n") {
		t.Errorf("an IPv6 address: %v %q", err, e6.Config)
	}
	for name, change := range map[string]func(*Host){
		"a ProxyCommand in the address":     func(h *Host) { h.Address = "evil\n  ProxyCommand sh -c 'touch /tmp/pwned':22" },
		"a space in the address":            func(h *Host) { h.Address = "a b:22" },
		"a port out of range":               func(h *Host) { h.Address = "203.0.113.10:70000" },
		"a port with a sign":                func(h *Host) { h.Address = "203.0.113.10:+22" },
		"an option-like host":               func(h *Host) { h.Address = "-oProxyCommand=x:22" },
		"a second known_hosts line":         func(h *Host) { h.HostKey = goodKey + "\n* ssh-ed25519 AAAA" },
		"key options":                       func(h *Host) { h.HostKey = `command="x" ` + goodKey },
		"no key":                            func(h *Host) { h.HostKey = "not a key" },
		"a certificate as host key":         func(h *Host) { h.HostKey = "ssh-ed25519-cert-v01@openssh.com AAAA" },
		"a login user with a newline":       func(h *Host) { h.LoginUser = "ubuntu\n  LocalCommand id" },
		"a login user with spaces":          func(h *Host) { h.LoginUser = "u b" },
		"a project that is no label":        func(h *Host) { h.Project = "acme\nHost *" },
		"a host name that is no name":       func(h *Host) { h.Name = "gpu 001" },
		"a token in a local path":           func(h *Host) { h.IdentityFile = "/home/%u/key" },
		"a quote in a local path":           func(h *Host) { h.KnownHosts = `/home/me/"x` },
		"a newline in a local path":         func(h *Host) { h.CertificateFile = "/home/me/x\nProxyCommand y" },
		"an empty local path":               func(h *Host) { h.KnownHosts = "" },
		"a relative local path":             func(h *Host) { h.KnownHosts = ".config/nodus/ssh/known_hosts" },
		"a home-relative local path":        func(h *Host) { h.IdentityFile = "~/.config/nodus/ssh/id_ed25519" },
		"a variable in a local path":        func(h *Host) { h.IdentityFile = "/home/${USER}/key" },
		"a pattern in a local path":         func(h *Host) { h.CertificateFile = "/home/me/*/cert" },
		"a class in a local path":           func(h *Host) { h.KnownHosts = "/home/me/[ab]/known_hosts" },
		"a DNS name with an underscore":     func(h *Host) { h.Address = "gpu_001.example:22" },
		"an address without a port at all":  func(h *Host) { h.Address = "203.0.113.10" },
		"a zero port":                       func(h *Host) { h.Address = "203.0.113.10:0" },
		"a login user that is far too long": func(h *Host) { h.LoginUser = strings.Repeat("u", 40) },
		"root as the login user":            func(h *Host) { h.LoginUser = "root" },
	} {
		h := host()
		change(&h)
		if e, err := Make(h); err == nil {
			t.Errorf("%s: accepted:\n%s%s", name, e.Config, e.KnownHosts)
		}
	}
}

// FuzzMake: whatever the server sends, an entry is either refused or made
// of exactly the lines nodus means, with one known_hosts line holding one
// parseable key.
func FuzzMake(f *testing.F) {
	f.Add("203.0.113.10:22", "ubuntu", goodKey, "gpu-001")
	f.Add("evil\n  ProxyCommand sh:22", "root", goodKey+"\n* x", "h")
	f.Add("[::1]:2222", "a_b-c", "ssh-rsa AAAA", "x.y")
	f.Fuzz(func(t *testing.T, address, user, key, name string) {
		h := host()
		h.Address, h.LoginUser, h.HostKey, h.Name = address, user, key, name
		e, err := Make(h)
		if err != nil {
			return
		}
		lines := strings.Split(strings.TrimSuffix(e.Config, "\n"), "\n")
		want := []string{"Host ", "  HostName ", "  Port ", "  User ", "  HostKeyAlias ", "  UserKnownHostsFile ",
			"  StrictHostKeyChecking yes", "  IdentitiesOnly yes", "  IdentityFile ", "  CertificateFile ", "  ForwardAgent no", "  ForwardX11 no", "  UpdateHostKeys no",
			"  GlobalKnownHostsFile /dev/null", "  VerifyHostKeyDNS no"}
		if len(lines) != len(want) {
			t.Fatalf("%d lines:\n%s", len(lines), e.Config)
		}
		for i, line := range lines {
			if !strings.HasPrefix(line, want[i]) || strings.ContainsAny(line, "\r\x00") {
				t.Fatalf("line %d is %q", i, line)
			}
			if i > 0 && len(strings.Fields(line)) != 2 && !strings.Contains(line, `"`) {
				t.Fatalf("line %d has more than one value: %q", i, line)
			}
		}
		if strings.Count(e.KnownHosts, "\n") != 1 || !strings.HasSuffix(e.KnownHosts, "\n") {
			t.Fatalf("known_hosts: %q", e.KnownHosts)
		}
		fields := strings.Fields(e.KnownHosts)
		if len(fields) != 3 || fields[0] != e.Alias {
			t.Fatalf("known_hosts: %q", e.KnownHosts)
		}
		if _, err := ssh.ParsePublicKey(mustBase64(t, fields[2])); err != nil {
			t.Fatalf("known_hosts key: %v", err)
		}
	})
}

func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("not base64: %q", s)
	}
	return data
}
