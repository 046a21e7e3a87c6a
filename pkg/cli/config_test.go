package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/pki"
)

// run runs nodus with args on the configuration config, in process.
func run(config string, args ...string) (string, int) {
	var out bytes.Buffer
	cmd, g := NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	cmd.SetArgs(append([]string{"--kubeconfig", config}, args...))
	code := Report(cmd.Execute(), g.Output, &out)
	return out.String(), code
}

// TestLoginsAtOnceKeepEachOthersContexts: logins at once (scripts logging
// in to several servers) each read, change and write the one
// configuration; none may drop another's context, and a command reading
// the configuration meanwhile never finds it half written.
func TestLoginsAtOnceKeepEachOthersContexts(t *testing.T) {
	config := filepath.Join(t.TempDir(), "nodus", "config")
	const logins = 16
	var wg sync.WaitGroup
	errs := make(chan string, 2*logins)
	for i := range logins {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if out, code := run(config, "login", "--server", fmt.Sprintf("https://h%d.example:8443", i), "--token", "t.secret"); code != 0 {
				errs <- fmt.Sprintf("login %d: %d %s", i, code, out)
			}
		}()
		go func() {
			defer wg.Done()
			if out, code := run(config, "config", "get-contexts"); code != 0 {
				errs <- fmt.Sprintf("get-contexts during the logins: %d %s", code, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	cfg, err := clientcmd.LoadFromFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Contexts) != logins {
		t.Errorf("%d contexts after %d logins: %v", len(cfg.Contexts), logins, cfg.Contexts)
	}
}

// TestALoginLeavesALinkedConfigurationALink: a configuration that is a
// dotfile manager's link stays one; the file it points to gets the login.
func TestALoginLeavesALinkedConfigurationALink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "dotfiles", "nodus-config"), filepath.Join(dir, "nodus", "config")
	for _, d := range []string{filepath.Dir(target), filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if out, code := run(link, "login", "--server", "https://h.example:8443", "--token", "t.secret"); code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link is no longer one: %v %v", info, err)
	}
	if cfg, err := clientcmd.LoadFromFile(target); err != nil || cfg.CurrentContext != "h.example-8443" {
		t.Errorf("the linked file: %v %v", cfg, err)
	}
}

// TestARelativeConfigHomeIsNotUsed: an XDG_CONFIG_HOME that is not
// absolute is no configuration home (the XDG spec: ignore it), and a HOME
// that is not absolute is not one either: nodus' files, its SSH key among
// them, would land in whatever directory the command runs in. The
// account's own home is used instead.
func TestARelativeConfigHomeIsNotUsed(t *testing.T) {
	for name, env := range map[string][2]string{
		"a relative XDG_CONFIG_HOME": {"config", "/home/someone"},
		"no HOME":                    {"", ""},
		"a relative HOME":            {"", "home"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", env[0])
			t.Setenv("HOME", env[1])
			for _, dir := range []string{DataDir(), (&Globals{}).ConfigPath()} {
				if !filepath.IsAbs(dir) {
					t.Errorf("XDG_CONFIG_HOME=%q HOME=%q: nodus uses %q", env[0], env[1], dir)
				}
			}
		})
	}
}

// TestAnAdoptedKubeconfigsNamesAreShownEscaped: a kubeconfig adopted from
// someone else (a provider's) names its contexts and servers; a name with
// an escape sequence reached the terminal as it was, when the login said
// which context it took and when get-contexts listed it. (A server that is
// no https URL is refused, and shown escaped too.)
func TestAnAdoptedKubeconfigsNamesAreShownEscaped(t *testing.T) {
	dir := t.TempDir()
	const hostile = "prod\x1b]52;c;cm0gLXJmIH4K\x07"
	adopted := filepath.Join(dir, "provider.kubeconfig")
	if err := os.WriteFile(adopted, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://nodus.example:8443"}
users:
- name: u
  user: {token: t.secret}
contexts:
- name: "`+yamlEscaped(hostile)+`"
  context: {cluster: c, user: u}
current-context: "`+yamlEscaped(hostile)+`"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "nodus", "config")
	for _, args := range [][]string{{"login", "--from-kubeconfig", adopted}, {"config", "get-contexts"}, {"config", "use-context", "missing"}} {
		out, _ := run(config, args...)
		if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `prod\x1b]52`) {
			t.Errorf("nodus %s: %q", strings.Join(args, " "), out)
		}
	}
	serverAdopted := filepath.Join(dir, "server.kubeconfig")
	if err := os.WriteFile(serverAdopted, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://nodus.example:8443/\e[2J"}
users:
- name: u
  user: {token: t.secret}
contexts:
- name: other
  context: {cluster: c, user: u}
current-context: other
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(config, "login", "--from-kubeconfig", serverAdopted); code != ExitUsage || strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("nodus login of a context whose server is no https URL: %d %q", code, out)
	}
}

// yamlEscaped is s for a double-quoted YAML string, whose escapes may name
// control characters that YAML refuses as they are.
func yamlEscaped(s string) string {
	return strings.NewReplacer("\x1b", `\e`, "\x07", `\a`).Replace(s)
}

// TestLoginTakesTheTokenOffTheCommandLine: a token given as --token TOKEN
// is in every local user's ps and in the shell's history. login reads it
// from stdin (--token -) or $NODUS_TOKEN, and refuses to go on without one
// rather than wait for a terminal that is not there.
func TestLoginTakesTheTokenOffTheCommandLine(t *testing.T) {
	tokenOf := func(config string) string {
		t.Helper()
		cfg, err := clientcmd.LoadFromFile(config)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
	}
	dir := t.TempDir()
	runWith := func(stdin, config string, args ...string) (string, int) {
		var out bytes.Buffer
		cmd, g := NewCommand(Streams{In: strings.NewReader(stdin), Out: &out, Err: &out})
		cmd.SetArgs(append([]string{"--kubeconfig", config}, args...))
		return out.String(), Report(cmd.Execute(), g.Output, &out)
	}
	fromStdin := filepath.Join(dir, "stdin")
	if out, code := runWith("alice-laptop.s3cret\n", fromStdin, "login", "--server", "https://nodus.example:8443", "--token", "-"); code != 0 || tokenOf(fromStdin) != "alice-laptop.s3cret" {
		t.Errorf("--token -: exit %d %s, token %q", code, out, tokenOf(fromStdin))
	}
	fromEnv := filepath.Join(dir, "env")
	t.Setenv(TokenEnv, "alice-laptop.fr0menv")
	if out, code := runWith("", fromEnv, "login", "--server", "https://nodus.example:8443"); code != 0 || tokenOf(fromEnv) != "alice-laptop.fr0menv" {
		t.Errorf("$%s: exit %d %s, token %q", TokenEnv, code, out, tokenOf(fromEnv))
	}
	t.Setenv(TokenEnv, "")
	none := filepath.Join(dir, "none")
	for _, stdin := range []string{"", "\n"} {
		args := []string{"login", "--server", "https://nodus.example:8443"}
		if stdin != "" {
			args = append(args, "--token", "-")
		}
		if out, code := runWith(stdin, none, args...); code != ExitUsage {
			t.Errorf("no token (stdin %q): exit %d %s, want a usage error", stdin, code, out)
		}
	}
	if _, err := os.Stat(none); err == nil {
		t.Error("a login without a token wrote the configuration")
	}
}

// TestAdoptingKeepsAnotherServersContext: every nodus-server writes its
// admin kubeconfig with the same context name. Adopting a second server's
// replaced the first's address, CA and credential without a word.
func TestAdoptingKeepsAnotherServersContext(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := func(file, server, token string) string {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`"}}]
users: [{name: u, user: {token: `+token+`}}]
contexts: [{name: nodus-admin@nodus, context: {cluster: c, user: u}}]
current-context: nodus-admin@nodus
`), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	staging, prod := kubeconfig("staging", "https://staging:8443", "s.staging"), kubeconfig("prod", "https://prod:8443", "p.prod")
	config := filepath.Join(dir, "nodus", "config")
	serverOf := func(context string) string {
		cfg, err := clientcmd.LoadFromFile(config)
		if err != nil {
			t.Fatal(err)
		}
		if c := cfg.Clusters[context]; c != nil {
			return c.Server
		}
		return ""
	}
	if out, code := run(config, "login", "--from-kubeconfig", staging); code != 0 {
		t.Fatalf("adopting staging: %d %s", code, out)
	}
	if out, code := run(config, "login", "--from-kubeconfig", prod); code != ExitUsage || !strings.Contains(out, "--name") {
		t.Errorf("adopting another server's context under the same name: exit %d %s", code, out)
	}
	if got := serverOf("nodus-admin@nodus"); got != "https://staging:8443" {
		t.Errorf("the refused adoption changed the context: %s", got)
	}
	if out, code := run(config, "login", "--from-kubeconfig", staging); code != 0 {
		t.Errorf("adopting the same server's again: %d %s", code, out)
	}
	if out, code := run(config, "login", "--from-kubeconfig", prod, "--name", "prod"); code != 0 || serverOf("prod") != "https://prod:8443" || serverOf("nodus-admin@nodus") != "https://staging:8443" {
		t.Errorf("adopting under another name: %d %s", code, out)
	}
	if out, code := run(config, "login", "--from-kubeconfig", prod, "--replace"); code != 0 || serverOf("nodus-admin@nodus") != "https://prod:8443" {
		t.Errorf("adopting with --replace: %d %s", code, out)
	}
	if out, code := run(config, "login", "--server", "https://other:8443", "--token", "t.secret", "--name", "x"); code != ExitUsage {
		t.Errorf("--name without a kubeconfig to adopt: %d %s", code, out)
	}
}

// TestLoginRefusesACAFileThatHoldsNoCertificate: --ca-file was stored as
// it was, and a DER file or a wrong file (a key, a kubeconfig) made every
// later command fail with "unable to load root certificates", no fix, exit
// 1. It is refused at login, where the mistake is.
func TestLoginRefusesACAFileThatHoldsNoCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"pem": ca.CertPEM, "der": ca.Cert.Raw, "empty": nil, "text": []byte("not a certificate\n"),
		"key": []byte("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n")}
	for name, data := range files {
		file := filepath.Join(dir, name+".crt")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		config := filepath.Join(dir, name, "config")
		var out bytes.Buffer
		cmd, g := NewCommand(Streams{In: strings.NewReader("alice-laptop.s3cret\n"), Out: &out, Err: &out})
		cmd.SetArgs([]string{"--kubeconfig", config, "login", "--server", "https://nodus.example:8443", "--token", "-", "--ca-file", file})
		code := Report(cmd.Execute(), g.Output, &out)
		_, statErr := os.Stat(config)
		switch {
		case name == "pem" && (code != 0 || statErr != nil):
			t.Errorf("a PEM CA file: exit %d %s", code, out.String())
		case name != "pem" && (code != ExitUsage || statErr == nil || !strings.Contains(out.String(), "--ca-file")):
			t.Errorf("a CA file holding %s: exit %d %s (configuration written: %v), want a usage error naming --ca-file", name, code, out.String(), statErr == nil)
		}
	}
}

// TestAdoptingRunsNoCommandOfTheFile: a kubeconfig's user may run a
// command (exec, an auth provider) on every request. Adopted, it ran on
// every nodus command: a file someone else wrote is a command of theirs.
// nodus adopts tokens and client certificates only.
func TestAdoptingRunsNoCommandOfTheFile(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for name, user := range map[string]string{
		"exec":          `{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "touch ` + marker + `"]}}`,
		"auth-provider": `{auth-provider: {name: oidc, config: {idp-issuer-url: "https://issuer.example"}}}`,
	} {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://nodus.example:8443"}}]
users: [{name: u, user: `+user+`}]
contexts: [{name: theirs, context: {cluster: c, user: u}}]
current-context: theirs
`), 0o600); err != nil {
			t.Fatal(err)
		}
		config := filepath.Join(dir, name+"-nodus", "config")
		if out, code := run(config, "login", "--from-kubeconfig", file); code != ExitUsage || !strings.Contains(out, "does not adopt") {
			t.Errorf("adopting a context whose user runs %s: exit %d %s, want a usage error", name, code, out)
		}
		if _, err := os.Stat(config); err == nil {
			t.Errorf("adopting a context whose user runs %s wrote the configuration", name)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the adopted file's command ran")
	}
}
