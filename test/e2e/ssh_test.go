package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/sshca"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// TestSSHAccessThroughSystemSSHD runs the whole access path as a customer
// meets it: nodus-server, nodusd enrolled with a token, the system's own
// sshd on Debian's stock configuration plus nodusd's drop-in (trusting the
// server's SSH user CA with nodusd's principals, certificates only for the
// login users), and the system ssh client with the pinned host key. A
// release ends a live session, refuses new logins and the old certificate,
// and drains the host; then the host is cleaned for the next tenant.
func TestSSHAccessThroughSystemSSHD(t *testing.T) {
	requireKubectl(t)
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates a login user and runs sshd (CI runs as root)")
	}
	if _, err := os.Stat(sshd); err != nil {
		t.Skip("sshd is not installed (.ci/run installs openssh-server)")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	login := "nodus" + hex.EncodeToString(suffix)
	run(t, "useradd", "--create-home", "--shell", "/bin/sh", login)
	// No password, but not locked: sshd without PAM refuses locked accounts.
	run(t, "usermod", "-p", "*", login)
	// A second account, for a login-user change.
	login2 := login + "b"
	run(t, "useradd", "--create-home", "--shell", "/bin/sh", login2)
	run(t, "usermod", "-p", "*", login2)
	t.Cleanup(func() {
		for _, u := range []string{login, login2} {
			_ = exec.Command("pkill", "-KILL", "-u", u).Run()
			_ = exec.Command("crontab", "-r", "-u", u).Run()
			_ = exec.Command("userdel", "-r", u).Run()
		}
	})
	// Borrowers' executions run as unprivileged accounts of their own: two slots.
	borrower, removeSlots, err := testhost.BorrowerSlots("nodusb", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(removeSlots)

	dir := t.TempDir()
	s := startServer(t, filepath.Join(dir, "server"))
	manifest := fmt.Sprintf(`apiVersion: nodus.dev/v1
kind: Pool
metadata: {name: e2e}
---
apiVersion: nodus.dev/v1
kind: Project
metadata: {name: acme}
spec:
  members:
  - {name: mia, role: member}
  - {name: ada, role: admin}
  - {name: vic, role: viewer}
---
apiVersion: nodus.dev/v1
kind: EnrollmentToken
metadata: {name: e2e-node}
spec: {pool: e2e, resourceClass: gpu-e2e, loginUser: %s}
`, login)
	out := s.apply(t, manifest, "create", "-o", "json")
	// kubectl prints one JSON document per object.
	var enrollToken, caHash string
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var obj struct {
			Kind   string
			Status struct{ Token, CAFingerprint string }
		}
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("create output: %v\n%s", err, out)
		}
		if obj.Kind == "EnrollmentToken" {
			enrollToken, caHash = obj.Status.Token, obj.Status.CAFingerprint
		}
	}
	tokens := map[string]string{}
	for _, who := range []string{"mia", "ada", "vic"} {
		out := s.apply(t, "apiVersion: nodus.dev/v1\nkind: AccessToken\nmetadata: {name: "+who+"}\nspec: {user: "+who+"}\n",
			"create", "-o", "jsonpath={.status.token}")
		tokens[who] = out
	}

	// The host: nodusd enrolled and running, sshd trusting the server's CA.
	agentDir := filepath.Join(dir, "agent")
	// The borrower account must reach its work directories: not under the
	// test's private temporary directory.
	executionsDir, err := os.MkdirTemp("/var/tmp", "nodus-executions-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(executionsDir) })
	// The operator's images: a one-binary OCI image, where umoci and a
	// static busybox exist (CI installs them).
	imagesDir := filepath.Join(dir, "images")
	if err := os.Mkdir(imagesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	withImages := true
	if err := testhost.TinyImage(filepath.Join(imagesDir, "tiny"), "v1", t.TempDir()); errors.Is(err, testhost.ErrNoImageTools) {
		t.Logf("no umoci or busybox: executions in images are not checked")
		withImages = false
	} else if err != nil {
		t.Fatal(err)
	}
	serverURL := strings.TrimSpace(s.must(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	run(t, agentBinary, "enroll", "--server", serverURL, "--token", enrollToken, "--ca-hash", caHash, "--name", "e2e-node", "--state-dir", agentDir)
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(agentDir, "ssh_host_ed25519_key"))
	port := freePort(t)
	// The operator's own handover step: here it only records that it ran.
	cleanCommand := fmt.Sprintf(`echo "request $NODUS_CLEAN_REQUEST users $NODUS_CLEAN_USERS" >> %s`, filepath.Join(agentDir, "clean.log"))
	// Its login group is the test's own, so that the host's is left alone.
	loginGroup := "nodusg" + hex.EncodeToString(suffix)
	t.Cleanup(func() { _ = exec.Command("groupdel", loginGroup).Run() })
	// Two GPUs as far as nodusd can tell, where the host has none (CI):
	// its device cgroup then has real device nodes to allow and refuse.
	fakeGPUs := filepath.Join(dir, "fake-gpus")
	gpus := 0
	switch removeGPUs, err := testhost.FakeGPUs(fakeGPUs, 2); {
	case errors.Is(err, testhost.ErrHasNVIDIA):
		t.Logf("%v: GPU device isolation is checked by pkg/agent/sandbox only", err)
	case err != nil:
		t.Fatal(err)
	default:
		gpus = 2
		t.Cleanup(removeGPUs)
	}
	agent := &agentProcess{path: agentBinary, log: &syncBuffer{},
		env: append(os.Environ(), "PATH="+fakeGPUs+string(os.PathListSeparator)+os.Getenv("PATH")),
		args: []string{"run", "--state-dir", agentDir, "--ssh-host-key", filepath.Join(agentDir, "ssh_host_ed25519_key.pub"),
			"--ssh-address", fmt.Sprintf("127.0.0.1:%d", port), "--sshd-ca-file", filepath.Join(agentDir, "user_ca.pub"), "--sshd-drop-in", filepath.Join(agentDir, "nodus.conf"),
			"--grace", "1s", "--disk-path", dir, "--borrower-user", borrower, "--borrower-slots", "2", "--executions-dir", executionsDir,
			"--clean-command", cleanCommand, "--clean-timeout", "1m", "--login-group", loginGroup, "--images-dir", imagesDir}}
	agent.start(t)
	t.Cleanup(agent.stop)
	agentLog := agent.log
	waitFor(t, "nodusd's sshd drop-in", func() bool { _, err := os.Stat(filepath.Join(agentDir, "nodus.conf")); return err == nil })

	// Debian's stock sshd_config, which reads ~/.ssh/authorized_keys for
	// everyone, with nodusd's drop-in where it includes sshd_config.d.
	config := filepath.Join(agentDir, "sshd_config")
	if err := os.WriteFile(config, []byte(stockSSHDConfig(t, fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nPidFile %s\nInclude %s\n",
		port, filepath.Join(agentDir, "ssh_host_ed25519_key"), filepath.Join(agentDir, "sshd.pid"), filepath.Join(agentDir, "nodus.conf")))), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll("/run/sshd", 0o755)
	daemon := exec.Command(sshd, "-D", "-e", "-f", config)
	sshdLog := &syncBuffer{}
	daemon.Stdout, daemon.Stderr = sshdLog, sshdLog
	// A session process left behind holds sshd's output open: never wait on it for ever.
	daemon.WaitDelay = time.Second
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })

	runs := 20
	if n, err := strconv.Atoi(os.Getenv("NODUS_SSH_RUNS")); err == nil && n > 0 {
		runs = n
	}
	var refused, ended, drained []time.Duration
	for i := 0; i < runs; i++ {
		r, e, d := accessRun(t, s, sshRig{dir: dir, agentDir: agentDir, port: port, login: login, tokens: tokens, sshdLog: sshdLog, agentLog: agentLog}, fmt.Sprintf("run-%02d", i))
		refused, ended, drained = append(refused, r), append(ended, e), append(drained, d)
	}
	t.Logf("over %d runs: release → new login refused %s, → live session ended %s, → drainedAt %s",
		runs, p50p99(refused), p50p99(ended), p50p99(drained))

	t.Run("through the nodus CLI only", func(t *testing.T) { cliRun(t, s, sshRig{dir: dir, port: port, login: login, tokens: tokens}) })
	rig := sshRig{dir: dir, agentDir: agentDir, port: port, login: login, login2: login2, tokens: tokens, borrower: borrower,
		executionsDir: executionsDir, withImages: withImages, gpus: gpus, agent: agent, sshdLog: sshdLog, agentLog: agentLog}
	t.Run("lending drains with the release", func(t *testing.T) { lendingRun(t, s, rig) })
	t.Run("handover to the next tenant", func(t *testing.T) { handoverRun(t, s, rig) })
	t.Run("every way out retires access", func(t *testing.T) { wayOutRuns(t, s, rig) })
	t.Run("nodusd's log names no borrower", func(t *testing.T) { noBorrowerLogged(t, s, rig) })
}

// stockSSHDConfig is Debian's shipped sshd_config (the pristine copy the
// package keeps) with its Include of sshd_config.d replaced by head.
func stockSSHDConfig(t *testing.T, head string) string {
	t.Helper()
	var stock []byte
	for _, path := range []string{"/usr/share/openssh/sshd_config", "/etc/ssh/sshd_config"} {
		if data, err := os.ReadFile(path); err == nil {
			stock = data
			break
		}
	}
	const include = "Include /etc/ssh/sshd_config.d/*.conf"
	if !strings.Contains(string(stock), include) {
		t.Skipf("no stock Debian sshd_config with %q here (.ci/run installs openssh-server)", include)
	}
	return strings.Replace(string(stock), include, strings.TrimSpace(head), 1)
}

// cliRun is what a customer does with the CLI alone: log in, list, ssh,
// release and wait, and find access gone.
func cliRun(t *testing.T, s *serverProcess, rig sshRig) {
	home := filepath.Join(rig.dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	own := "Host my-own-box\n  HostName 192.0.2.1\n"
	if err := os.WriteFile(filepath.Join(home, ".ssh", "config"), []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	people := newCustomers(t, s, home, map[string]string{"mia": rig.tokens["mia"], "ada": rig.tokens["ada"]})
	nodus := people.run
	s.apply(t, fmt.Sprintf(`apiVersion: nodus.dev/v1
kind: Reservation
metadata: {name: cli-host}
spec:
  project: acme
  placement: {node: e2e-node}
  startsAt: "%s"
  endsAt: "%s"
`, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339)), "create")
	people.waitConnected(t, "mia", "acme/cli-host")
	for i := 0; i < 2; i++ {
		out, err := nodus("mia", "ssh", "acme/cli-host", "--", "id", "-un")
		if err != nil || strings.TrimSpace(out) != rig.login {
			t.Fatalf("nodus ssh (%d): %v %q", i, err, out)
		}
	}
	// A command word that looks like an option stays the remote command's:
	// ssh takes options after the host name too, and one there could unpin
	// the host key or run a local ProxyCommand (here -V would print ssh's
	// version and connect nowhere).
	if out, err := nodus("mia", "ssh", "acme/cli-host", "--", "-V"); err == nil || strings.Contains(out, "OpenSSH_") {
		t.Errorf("nodus ssh HOST -- -V: the remote command became an option of the local ssh: %v %q", err, out)
	}
	config, _ := os.ReadFile(filepath.Join(home, ".ssh", "config"))
	if !strings.HasSuffix(string(config), own) || strings.Count(string(config), "# nodus begin include") != 1 {
		t.Errorf("~/.ssh/config must keep the user's lines and hold one nodus block:\n%s", config)
	}
	included, _ := os.ReadFile(filepath.Join(home, ".config", "nodus", "ssh", "config"))
	if strings.Count(string(included), "# nodus begin cli-host.acme.nodus") != 1 {
		t.Errorf("running nodus ssh twice must leave one managed block:\n%s", included)
	}
	removedMemberRun(t, s, home, nodus, rig.login)

	out, err := nodus("ada", "release", "acme/cli-host", "--yes", "--wait", "--timeout", "60s")
	if err != nil || !strings.Contains(out, "drained after") {
		t.Fatalf("nodus release --wait: %v\n%s", err, out)
	}
	out, err = nodus("mia", "ssh", "acme/cli-host", "--", "true")
	if err == nil || !strings.Contains(out, "no access now") {
		t.Errorf("nodus ssh after the release must be refused clearly: %v %q", err, out)
	}
}

// removedMemberRun removes mia from the project while she holds a
// certificate for cli-host (an hour's): the certificate no longer opens the
// host, through the system ssh alone, and nodus ssh gets her no new one; a
// member who stays connects again. Then mia is a member again.
func removedMemberRun(t *testing.T, s *serverProcess, home string, nodus func(string, ...string) (string, error), login string) {
	plainSSH := func() ([]byte, error) {
		// ssh reads the config of the account's home, not $HOME.
		cmd := exec.Command("ssh", "-F", filepath.Join(home, ".ssh", "config"), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
			"cli-host.acme.nodus", "id", "-un")
		return cmd.CombinedOutput()
	}
	if out, err := plainSSH(); err != nil || strings.TrimSpace(string(out)) != login {
		t.Fatalf("the system ssh with mia's certificate, before her removal: %v %q", err, out)
	}
	members := `{"spec":{"members":[{"name":"mia","role":"member"},{"name":"ada","role":"admin"},{"name":"vic","role":"viewer"}]}}`
	s.must(t, "patch", "projects.nodus.dev", "acme", "--type", "merge", "-p", strings.Replace(members, `{"name":"mia","role":"member"},`, "", 1))
	waitFor(t, "mia's certificate to open the host no more", func() bool { _, err := plainSSH(); return err != nil })
	if out, err := nodus("mia", "ssh", "acme/cli-host", "--", "true"); err == nil || !strings.Contains(out, "not a member") {
		t.Errorf("nodus ssh by a removed member: %v %q", err, out)
	}
	if out, err := nodus("ada", "ssh", "acme/cli-host", "--", "id", "-un"); err != nil || strings.TrimSpace(out) != login {
		t.Errorf("nodus ssh by a member who stays, after the epoch moved: %v %q", err, out)
	}
	s.must(t, "patch", "projects.nodus.dev", "acme", "--type", "merge", "-p", members)
}

// sshRig is the host side of the SSH test.
type sshRig struct {
	dir, agentDir     string
	port              int
	login, login2     string
	borrower          string
	executionsDir     string
	withImages        bool // the host has the image "tiny:v1"
	gpus              int  // GPUs the host has, stand-ins in CI
	agent             *agentProcess
	tokens            map[string]string
	sshdLog, agentLog *syncBuffer
}

// agentProcess is the host's nodusd, which a test may restart with other flags.
type agentProcess struct {
	path string
	args []string
	env  []string
	log  *syncBuffer
	cmd  *exec.Cmd
}

// start runs nodusd with its arguments and extra.
func (a *agentProcess) start(t *testing.T, extra ...string) {
	t.Helper()
	a.cmd = exec.Command(a.path, append(append([]string(nil), a.args...), extra...)...)
	a.cmd.Env, a.cmd.Stdout, a.cmd.Stderr = a.env, a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// stop ends nodusd as an operator's restart does.
func (a *agentProcess) stop() {
	if a.cmd != nil {
		_ = a.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = a.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-done
		}
		a.cmd = nil
	}
}

// accessRun reserves the host under name, logs in, holds a session, releases
// and measures how long until each effect of the release shows.
func accessRun(t *testing.T, s *serverProcess, rig sshRig, name string) (refused, ended, drained time.Duration) {
	t.Helper()
	dir, port, login, tokens, sshdLog, agentLog := rig.dir, rig.port, rig.login, rig.tokens, rig.sshdLog, rig.agentLog
	// The reservation, and its projection with the pinned host key.
	s.apply(t, fmt.Sprintf(`apiVersion: nodus.dev/v1
kind: Reservation
metadata: {name: %s}
spec:
  project: acme
  placement: {node: e2e-node}
  startsAt: "%s"
  endsAt: "%s"
`, name, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339)), "create")
	var hostKey string
	waitOr(t, "the host to be connected", func() bool {
		out, _, _ := s.kubectl("get", "reservedhost", name, "-n", "acme", "-o",
			`jsonpath={.status.conditions[?(@.type=="Connected")].status} {.status.connect.hostKey}`)
		status, key, _ := strings.Cut(out, " ")
		hostKey = key
		return status == "True" && key != ""
	}, func() string {
		conditions, _, _ := s.kubectl("get", "reservedhost", name, "-n", "acme", "-o", "jsonpath={.status.conditions}")
		return "acme/" + name + "'s conditions: " + conditions + "\n" + handoverState(s, rig, "acme", name, name)
	})
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", port, hostKey)), 0o600); err != nil {
		t.Fatal(err)
	}

	userKey := filepath.Join(dir, "id_"+name)
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", userKey)
	pub, _ := os.ReadFile(userKey + ".pub")
	certify := func(who string) (int, string) {
		cfg, _ := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
		cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
		cfg.BearerToken = tokens[who]
		answer, err := versioned.NewForConfigOrDie(cfg).NodusV1().ReservedHosts("acme").SSHCertificate(context.Background(), name,
			&nodusv1.ReservedHostSSHCertificate{PublicKey: string(pub)}, metav1.CreateOptions{})
		if err != nil {
			var status apierrors.APIStatus
			if errors.As(err, &status) {
				return int(status.Status().Code), err.Error()
			}
			return 0, err.Error()
		}
		raw, _ := json.Marshal(answer)
		return http.StatusOK, string(raw)
	}
	if code, _ := certify("vic"); code != 403 {
		t.Errorf("a viewer got an SSH certificate: %d", code)
	}
	code, answer := certify("mia")
	var cert struct{ Certificate, LoginUser, Address string }
	if code != 200 || json.Unmarshal([]byte(answer), &cert) != nil || cert.LoginUser != login || cert.Address != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("certificate for a member: %d %s", code, answer)
	}
	if err := os.WriteFile(userKey+"-cert.pub", []byte(cert.Certificate), 0o600); err != nil {
		t.Fatal(err)
	}
	ssh := func(args ...string) *exec.Cmd {
		return exec.Command("ssh", append([]string{"-p", fmt.Sprint(port), "-i", userKey, "-o", "CertificateFile=" + userKey + "-cert.pub",
			"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + knownHosts, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
			"-o", "ConnectTimeout=10", login + "@127.0.0.1"}, args...)...)
	}
	if out, err := ssh("echo", "hello-from-$(whoami)").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "hello-from-"+login {
		t.Fatalf("login failed: %v %s\nsshd: %s\nnodusd: %s", err, out, sshdLog.String(), agentLog.String())
	}
	if name == "run-00" {
		checkExpiredCertificateRefused(t, s, rig, name, userKey, ssh)
	}
	long := ssh("sleep", "600")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	sessionEnded := make(chan time.Time, 1)
	go func() { _ = long.Wait(); sessionEnded <- time.Now() }()
	waitFor(t, "the long session", func() bool {
		out, _ := exec.Command("pgrep", "-u", login, "sleep").Output()
		return len(out) > 0
	})

	// Release as the project admin.
	adminCfg, _ := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	adminCfg.CertData, adminCfg.KeyData, adminCfg.CertFile, adminCfg.KeyFile = nil, nil, "", ""
	adminCfg.BearerToken = tokens["ada"]
	released := time.Now()
	agreed, epoch := true, int64(1)
	if _, err := versioned.NewForConfigOrDie(adminCfg).NodusV1().ReservedHosts("acme").ReleaseCapacity(context.Background(), name,
		&nodusv1.ReservedHostReleaseRequest{Agreed: &agreed, Epoch: &epoch}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var refusedAfter, endedAfter, drainedAfter time.Duration
	// Each attempt is a whole SSH connection: the figure is precise to
	// about one attempt.
	waitFor(t, "new logins to be refused", func() bool {
		err := ssh("true").Run()
		refusedAfter = time.Since(released)
		return err != nil
	})
	select {
	case at := <-sessionEnded:
		endedAfter = at.Sub(released)
	case <-time.After(30 * time.Second):
		t.Fatal("the live session survived the release")
	}
	waitFor(t, "drainedAt", func() bool {
		out, _, _ := s.kubectl("get", "reservedhost", name, "-n", "acme", "-o", "jsonpath={.status.release.drainedAt}")
		drainedAfter = time.Since(released)
		return strings.TrimSpace(out) != ""
	})
	if err := ssh("true").Run(); err == nil {
		t.Error("the old certificate still logs in")
	}
	return refusedAfter, endedAfter, drainedAfter
}

// checkExpiredCertificateRefused signs, with the server's own SSH user CA, a
// certificate for the current principal that has already expired: sshd must
// refuse it.
func checkExpiredCertificateRefused(t *testing.T, s *serverProcess, rig sshRig, name, userKey string, ssh func(...string) *exec.Cmd) {
	t.Helper()
	ca, err := sshca.LoadOrCreate(filepath.Join(s.dataDir, "pki", "ssh-user-ca"))
	if err != nil {
		t.Fatal(err)
	}
	pubBytes, _ := os.ReadFile(userKey + ".pub")
	pub, _, _, _, err := gossh.ParseAuthorizedKey(pubBytes)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Client.NodusV1().Reservations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := ca.Sign(pub, "expired", sshvalue.Principal(name, res.UID, 1), time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	valid, _ := os.ReadFile(userKey + "-cert.pub")
	if err := os.WriteFile(userKey+"-cert.pub", gossh.MarshalAuthorizedKey(expired), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ssh("true").Run(); err == nil {
		t.Error("an expired certificate logged in")
	}
	if err := os.WriteFile(userKey+"-cert.pub", valid, 0o600); err != nil {
		t.Fatal(err)
	}
}

func p50p99(d []time.Duration) string {
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return fmt.Sprintf("p50 %s p99 %s", sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)*99/100].Round(time.Millisecond))
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// runOut runs a command and returns its output.
func runOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	waitOr(t, what, ok, func() string { return "" })
}
