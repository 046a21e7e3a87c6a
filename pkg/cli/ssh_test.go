package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli/sshentry"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// readOnly makes dir unwritable, for root too (chattr +i), or skips: what a
// dotfile manager's store is (home-manager, nix).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		return
	}
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s immutable here (chattr: %v %s)", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", dir).Run() })
}

// TestAReadOnlySSHConfigIsNotWritten: ~/.ssh/config as a link into a
// read-only store. One whose owner added the Include line is left alone
// (nodus ssh works); one without it gets an error that gives the line to
// add, not a bare permission error.
func TestAReadOnlySSHConfigIsNotWritten(t *testing.T) {
	dir := t.TempDir()
	included := filepath.Join(dir, "nodus", "ssh", "config")
	store := filepath.Join(dir, "store")
	home := filepath.Join(dir, "home", ".ssh")
	for _, d := range []string{store, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	with := "# managed by home-manager\nInclude \"" + included + "\"\n\nHost *\n  ServerAliveInterval 30\n"
	without := "Host *\n  ServerAliveInterval 30\n  Include \"" + included + "\"\n" // inside a Host block: not for every host
	for name, text := range map[string]string{"with": with, "without": without} {
		if err := os.WriteFile(filepath.Join(store, name), []byte(text), 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(store, name), filepath.Join(home, name)); err != nil {
			t.Fatal(err)
		}
	}
	readOnly(t, store)

	if err := includeFrom(filepath.Join(home, "with"), included); err != nil {
		t.Errorf("a read-only configuration that includes nodus' already: %v", err)
	}
	err := includeFrom(filepath.Join(home, "without"), included)
	if err == nil || !strings.Contains(err.Error(), "add this line") || !strings.Contains(err.Error(), `Include "`+included+`"`) {
		t.Errorf("a read-only configuration without the line: %v", err)
	}
	for name, text := range map[string]string{"with": with, "without": without} {
		if got, _ := os.ReadFile(filepath.Join(store, name)); string(got) != text {
			t.Errorf("%s changed:\n%s", name, got)
		}
	}
}

// TestNodusSSHPinsTheHostWhateverTheUsersConfigSays: a user's ssh_config
// that sets the alias's address, user, host keys or checking first (a
// Host *.nodus block above the Include, or no Include where ssh reads it)
// does not unpin the host: ssh, asked what it would do (ssh -G), uses the
// entry's settings.
func TestNodusSSHPinsTheHostWhateverTheUsersConfigSays(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("needs the OpenSSH client (CI installs it)")
	}
	dir := t.TempDir()
	entry, err := sshentry.Make(sshentry.Host{Project: "acme", Name: "gpu-001", Address: "203.0.113.10:2201", LoginUser: "ubuntu",
		HostKey:    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbVjsVzBH2uEj7iKtGEpEJyGYJvC1T9RyqT5K1hPFcY",
		KnownHosts: filepath.Join(dir, "known hosts"), IdentityFile: filepath.Join(dir, "id"), CertificateFile: filepath.Join(dir, "id-cert.pub")})
	if err != nil {
		t.Fatal(err)
	}
	userConfig := filepath.Join(dir, ".ssh", "config")
	hostile := "Host *.nodus\n  HostName evil.example\n  Port 22\n  User root\n  HostKeyAlias evil\n  UserKnownHostsFile /dev/null\n" +
		"  StrictHostKeyChecking no\n  CertificateFile /tmp/other\n\nInclude \"" + filepath.Join(dir, "nodus") + "\"\n"
	if err := os.MkdirAll(filepath.Dir(userConfig), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userConfig, []byte(hostile), 0o600); err != nil {
		t.Fatal(err)
	}
	args := sshArgs(entry, dir, nil) // dir is not this account's home: ssh -F dir/.ssh/config
	if !slices.Contains(args, userConfig) {
		t.Fatalf("ssh does not read the config of $HOME: %v", args)
	}
	// ssh's answer of what it would do, instead of a connection.
	out, err := exec.Command("ssh", append([]string{"-G"}, args[1:]...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh -G %v: %v %s", args[1:], err, out)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = append(got[k], v)
		}
	}
	for key, want := range map[string]string{"hostname": "203.0.113.10", "port": "2201", "user": "ubuntu", "hostkeyalias": entry.Alias,
		"userknownhostsfile": filepath.Join(dir, "known hosts"), "stricthostkeychecking": "true", "identitiesonly": "yes"} {
		if len(got[key]) == 0 || got[key][0] != want {
			t.Errorf("ssh uses %s %q, want %q", key, got[key], want)
		}
	}
	if len(got["certificatefile"]) == 0 || got["certificatefile"][0] != filepath.Join(dir, "id-cert.pub") {
		t.Errorf("ssh offers the certificates %q first, want %s", got["certificatefile"], filepath.Join(dir, "id-cert.pub"))
	}
}

// TestAnIncludeThatCameAfterAHostLineIsMovedToTheTop: nodus' Include block
// below a Host line (moved there by hand, or an editor) applies to that
// host only; it is taken out and written at the top again.
func TestAnIncludeThatCameAfterAHostLineIsMovedToTheTop(t *testing.T) {
	dir := t.TempDir()
	included := filepath.Join(dir, "nodus", "ssh", "config")
	userConfig := filepath.Join(dir, ".ssh", "config")
	if err := os.MkdirAll(filepath.Dir(userConfig), 0o700); err != nil {
		t.Fatal(err)
	}
	block := beginMarker + "include\nInclude \"" + included + "\"\n" + endMarker + "include\n"
	if err := os.WriteFile(userConfig, []byte("Host build\n  User ci\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := includeFrom(userConfig, included); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(userConfig)
	if string(got) != block+"Host build\n  User ci\n" {
		t.Errorf("the config:\n%s", got)
	}
}

// TestAKeptCertificateServesOnlyItsOwnHost: nodus ssh reuses the
// certificate it keeps for a host only while the host is the same
// ReservedHost at the same epoch, with a minute to spare. A record without
// the host's UID (an older nodus wrote none) matched any host answered
// without one, as a server that leaves it out does: it serves none.
func TestAKeptCertificateServesOnlyItsOwnHost(t *testing.T) {
	now := time.Now()
	const uid, other = "3f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	const hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	host := func(uid types.UID, epoch int64) *nodusv1.ReservedHost {
		h := &nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{Name: "gpu-7", UID: uid}}
		h.Status.Reservation.Epoch = epoch
		h.Status.Connect = &nodusv1.ReservedHostConnect{HostKey: hostKey}
		return h
	}
	unconnected := host(uid, 3)
	unconnected.Status.Connect = nil
	anotherMachine := host(uid, 3)
	anotherMachine.Status.Connect.HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFw0r0j9o8h3VwFQmxjz8n1nB1y3v2h0r9bq5q0qX1aB"
	record := func(host types.UID, epoch int64, left time.Duration) certificateRecord {
		r := certificateRecord{Host: host, HostKey: hostKey}
		r.Principal = sshvalue.Principal("gpu-7", "5f0c6f8e-2f6b-4c43-9a9e-1f2d3c4b5a69", epoch)
		until := metav1.NewTime(now.Add(left))
		r.ValidBefore = &until
		return r
	}
	for name, tc := range map[string]struct {
		r      certificateRecord
		h      *nodusv1.ReservedHost
		serves bool
	}{
		"its host, its epoch":                       {record(uid, 3, time.Hour), host(uid, 3), true},
		"another host of the name":                  {record(other, 3, time.Hour), host(uid, 3), false},
		"a later epoch":                             {record(uid, 3, time.Hour), host(uid, 4), false},
		"less than a minute left":                   {record(uid, 3, 30*time.Second), host(uid, 3), false},
		"a record without the host's UID":           {record("", 3, time.Hour), host(uid, 3), false},
		"neither the record nor the host has a UID": {record("", 3, time.Hour), host("", 3), false},
		"another machine's host key":                {record(uid, 3, time.Hour), anotherMachine, false},
		"a host without its connection details":     {record(uid, 3, time.Hour), unconnected, false},
	} {
		if got := tc.r.serves(tc.h, now); got != tc.serves {
			t.Errorf("%s: serves = %v, want %v", name, got, tc.serves)
		}
	}
}
