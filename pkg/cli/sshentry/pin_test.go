package sshentry

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyThePinnedKeyVouchesForTheHost: the entry pins the host key the
// server sent, but ssh also took a key its machine's global known_hosts
// vouched for (an `@cert-authority *` line there: a CA the laptop trusts
// for every host signs a key for any of them) and, where a "Host *" of the
// user turned it on, one DNS's SSHFP records name. Read by the real ssh,
// with such a "Host *" after nodus' block as the Include puts it, the
// entry's host trusts its pinned key alone; `nodus ssh` passes the same
// settings on ssh's command line.
func TestOnlyThePinnedKeyVouchesForTheHost(t *testing.T) {
	sshPath, err := exec.LookPath("ssh")
	if err != nil {
		t.Skipf("no ssh client (Debian: openssh-client): %v", err)
	}
	e, err := Make(host())
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "config")
	userHostStar := "Host *\n  GlobalKnownHostsFile /etc/ssh/ssh_known_hosts_of_a_corporate_ca\n  VerifyHostKeyDNS yes\n"
	if err := os.WriteFile(config, []byte(e.Config+"\n"+userHostStar), 0o600); err != nil {
		t.Fatal(err)
	}
	effective := func(args ...string) map[string]string {
		t.Helper()
		out, err := exec.Command(sshPath, append(args, e.Alias)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh -G: %v: %s", err, out)
		}
		settings := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok {
				settings[k] = v
			}
		}
		return settings
	}
	fromConfig := effective("-G", "-F", config)
	fromOptions := effective(append([]string{"-G", "-F", config}, optionArgs(e.Options)...)...)
	for how, got := range map[string]map[string]string{"the config's block": fromConfig, "the command line's options": fromOptions} {
		if got["globalknownhostsfile"] != "/dev/null" || got["verifyhostkeydns"] != "false" || got["stricthostkeychecking"] != "true" {
			t.Errorf("through %s, ssh trusts more than the pinned key: globalknownhostsfile %q, verifyhostkeydns %q, stricthostkeychecking %q",
				how, got["globalknownhostsfile"], got["verifyhostkeydns"], got["stricthostkeychecking"])
		}
	}
}

func optionArgs(options []string) []string {
	var args []string
	for _, o := range options {
		args = append(args, "-o", o)
	}
	return args
}
