package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// customers run the nodus CLI as people of the projects, each with a config
// of their own in one home (one ~/.ssh, as on one laptop).
type customers struct {
	home string
}

func newCustomers(t *testing.T, s *serverProcess, home string, tokens map[string]string) customers {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := customers{home: home}
	serverURL := strings.TrimSpace(s.must(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	ca := filepath.Join(s.dataDir, "pki", "ca.crt")
	for who, token := range tokens {
		if out, err := c.run(who, "login", "--server", serverURL, "--token", token, "--ca-file", ca); err != nil {
			t.Fatalf("login %s: %v %s", who, err, out)
		}
	}
	return c
}

// run runs nodus as user.
func (c customers) run(user string, args ...string) (string, error) {
	cmd := exec.Command(cliBinary, args...)
	cmd.Env = append(os.Environ(), "HOME="+c.home, "XDG_CONFIG_HOME="+filepath.Join(c.home, ".config"),
		"NODUS_CONFIG="+filepath.Join(c.home, user+".config"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitConnected waits until user's `nodus hosts list` shows host active and connected.
func (c customers) waitConnected(t *testing.T, user, host string) {
	t.Helper()
	project, _, _ := strings.Cut(host, "/")
	waitFor(t, host+" to be connected", func() bool {
		out, _ := c.run(user, "hosts", "list", "-n", project)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, host+" ") && strings.Contains(line, " active ") && strings.Contains(line, " yes ") {
				return true
			}
		}
		return false
	})
}

// reserve makes a reservation on the rig's node for project, for a day.
func reserve(t *testing.T, s *serverProcess, name, project, placement string) {
	t.Helper()
	s.apply(t, fmt.Sprintf(`apiVersion: nodus.dev/v1
kind: Reservation
metadata: {name: %s}
spec:
  project: %s
  placement: %s
  startsAt: "%s"
  endsAt: "%s"
`, name, project, placement, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339)), "create")
}

// handoverRun is the handover as two tenants meet it, through the CLI on a
// stock Debian sshd with nodusd's drop-in: tenant A plants a key, a crontab
// entry, an at job, a file, keys in the kernel's keyrings of its uid and a
// process that leaves its session, and
// releases; then all of it is refused or gone, and tenant B, reserved on the
// same node, becomes active only after the cleaning evidence and finds a
// fresh home.
func handoverRun(t *testing.T, s *serverProcess, rig sshRig) {
	for _, tool := range []string{"crontab", "at", "atq", "keyctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (.ci/run installs cron, at and keyutils)", tool)
		}
	}
	s.apply(t, `apiVersion: nodus.dev/v1
kind: Project
metadata: {name: gamma}
spec:
  members:
  - {name: gus, role: admin}
`, "create")
	gus := s.apply(t, "apiVersion: nodus.dev/v1\nkind: AccessToken\nmetadata: {name: gus}\nspec: {user: gus}\n", "create", "-o", "jsonpath={.status.token}")
	people := newCustomers(t, s, filepath.Join(rig.dir, "handover-home"), map[string]string{"mia": rig.tokens["mia"], "ada": rig.tokens["ada"], "gus": gus})

	reserve(t, s, "tenant-a", "acme", "{node: e2e-node}")
	people.waitConnected(t, "mia", "acme/tenant-a")
	planted := filepath.Join(rig.dir, "planted")
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", planted)
	plantedPub, _ := os.ReadFile(planted + ".pub")
	script := `set -e
mkdir -p ~/.ssh && chmod 700 ~/.ssh && echo '` + strings.TrimSpace(string(plantedPub)) + `' >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys
echo '* * * * * touch /tmp/nodus-cron-ran' | crontab -
echo 'touch /tmp/nodus-at-ran' | at now + 1 hour 2>/dev/null
echo tenant-a-secret > ~/a-file
keyctl add user nodus-tenant-a tenant-a-secret @u >/dev/null
keyctl add user nodus-tenant-a-persistent tenant-a-secret "$(keyctl get_persistent @s)" >/dev/null
setsid nohup sleep 1001 >/dev/null 2>&1 < /dev/null &
echo planted`
	if out, err := people.run("mia", "ssh", "acme/tenant-a", "--", script); err != nil || !strings.Contains(out, "planted") {
		t.Fatalf("tenant A planting: %v %s", err, out)
	}
	if out, _ := exec.Command("crontab", "-l", "-u", rig.login).CombinedOutput(); !strings.Contains(string(out), "nodus-cron-ran") {
		t.Fatalf("the crontab entry was not planted: %s", out)
	}
	if atJobs(t, rig.login) == 0 {
		t.Fatal("the at job was not planted")
	}
	plainKey := func() error {
		return exec.Command("ssh", "-p", fmt.Sprint(rig.port), "-i", planted, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10", rig.login+"@127.0.0.1", "true").Run()
	}
	// Certificate-only: the planted key is refused even while A holds the host.
	if err := plainKey(); err == nil {
		t.Fatal("a key planted in ~/.ssh/authorized_keys logs in on a stock sshd_config with nodusd's drop-in")
	}
	oldCert, _ := os.ReadFile(filepath.Join(people.home, ".config", "nodus", "ssh", "tenant-a.acme.nodus-cert.pub"))
	// An interactive login (a terminal): sshd records where it came from,
	// and shows it at the account's next one ("Last login: … from …").
	_, lastlogErr := exec.LookPath("lastlog")
	if lastlogErr != nil {
		t.Logf("the last login is not checked: %v (Debian 12's login package has lastlog; .ci/run installs it)", lastlogErr)
	} else {
		run(t, "lastlog", "--clear", "--user", rig.login) // not an earlier run's record
		terminal := exec.Command("ssh", "-F", filepath.Join(people.home, ".ssh", "config"), "-tt", "-o", "BatchMode=yes", "--", "tenant-a.acme.nodus", "true")
		terminal.Env = append(os.Environ(), "HOME="+people.home)
		if out, err := terminal.CombinedOutput(); err != nil {
			t.Fatalf("tenant A's interactive login: %v\n%s", err, out)
		}
		if last := lastLogin(t, rig.login); !strings.Contains(last, "127.0.0.1") {
			t.Fatalf("sshd recorded no last login of tenant A's interactive session:\n%s", last)
		}
	}

	requested := cleaningRequest(t, s)
	if out, err := people.run("ada", "release", "acme/tenant-a", "--yes", "--wait", "--timeout", "60s"); err != nil || !strings.Contains(out, "drained after") {
		t.Fatalf("nodus release --wait: %v\n%s", err, out)
	}
	reserve(t, s, "tenant-b", "gamma", "{node: e2e-node}")
	// B never activates before the cleaning that follows A is done.
	waitFor(t, "tenant B to be active", func() bool {
		state, _, _ := s.kubectl("get", "reservation", "tenant-b", "-o", "jsonpath={.status.state}")
		if state != "active" {
			return false
		}
		// Once B holds the node, the record of the cleaning after A names
		// nothing of A: B, root there, can read it with nodusd's credential.
		out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o",
			"jsonpath={.status.cleaning.request} {.status.cleaning.phase} {.status.cleaning.reservation}{.status.cleaning.users}{.status.cleaning.steps}")
		if out != fmt.Sprintf("%d Succeeded ", requested+1) {
			t.Fatalf("tenant B is active while the node's cleaning is %q (want request %d Succeeded, naming no one)", out, requested+1)
		}
		return true
	})
	// The operators' copy of the cleaning's report: the server's log.
	var recorded []string
	for _, line := range strings.Split(s.stdout.String(), "\n") {
		if strings.Contains(line, `"Cleaning recorded"`) {
			recorded = append(recorded, line)
		}
	}
	if !slices.ContainsFunc(recorded, func(line string) bool {
		return strings.Contains(line, fmt.Sprintf("request=%d", requested+1)) && strings.Contains(line, `reservation="tenant-a"`) &&
			strings.Contains(line, "ended every process of")
	}) {
		t.Errorf("the server's log has no report of the cleaning after tenant A (request %d); its cleaning reports:\n%s", requested+1, strings.Join(recorded, "\n"))
	}

	if out, err := people.run("mia", "ssh", "acme/tenant-a", "--", "true"); err == nil || !strings.Contains(out, "no access now") {
		t.Errorf("tenant A's nodus ssh after the release: %v %q", err, out)
	}
	if len(oldCert) > 0 {
		certFile := filepath.Join(rig.dir, "old-cert.pub")
		_ = os.WriteFile(certFile, oldCert, 0o600)
		key := filepath.Join(people.home, ".config", "nodus", "ssh", "id_ed25519")
		if err := exec.Command("ssh", "-p", fmt.Sprint(rig.port), "-i", key, "-o", "CertificateFile="+certFile, "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", rig.login+"@127.0.0.1", "true").Run(); err == nil {
			t.Error("tenant A's old certificate still logs in")
		}
	}
	if err := plainKey(); err == nil {
		t.Error("tenant A's planted key logs in after the release")
	}
	if out := running("-l", "-u", rig.login); out != "" {
		t.Errorf("processes of tenant A survived the handover: %s", out)
	}
	if out, err := exec.Command("crontab", "-l", "-u", rig.login).CombinedOutput(); err == nil || strings.Contains(string(out), "nodus-cron-ran") {
		t.Errorf("tenant A's crontab survived: %s", out)
	}
	if n := atJobs(t, rig.login); n != 0 {
		t.Errorf("%d at jobs of tenant A survived", n)
	}

	// Tenant B, the same account, is not shown where tenant A logged in from.
	if lastlogErr == nil {
		if last := lastLogin(t, rig.login); strings.Contains(last, "127.0.0.1") {
			t.Errorf("tenant A's last login survived the handover:\n%s", last)
		}
	}

	people.waitConnected(t, "gus", "gamma/tenant-b")
	out, err := people.run("gus", "ssh", "gamma/tenant-b", "--", "ls -A ~; test ! -e ~/a-file && test ! -e ~/.ssh && echo fresh")
	if err != nil || !strings.Contains(out, "fresh") {
		t.Errorf("tenant B's home is not fresh: %v\n%s", err, out)
	}
	skel, _ := os.ReadDir("/etc/skel")
	for _, e := range skel {
		if !strings.Contains(out, e.Name()) {
			t.Errorf("tenant B's home lacks %s from /etc/skel:\n%s", e.Name(), out)
		}
	}
	// The same uid as tenant A's: the kernel kept its user and persistent keyrings.
	keys, err := people.run("gus", "ssh", "gamma/tenant-b", "--",
		`keyctl search @u user nodus-tenant-a; keyctl search "$(keyctl get_persistent @s)" user nodus-tenant-a-persistent; echo searched`)
	if err != nil || !strings.Contains(keys, "searched") || strings.Count(keys, "Required key not available") != 2 {
		t.Errorf("tenant B finds tenant A's keys in the kernel's keyrings: %v\n%s", err, keys)
	}
	if log, _ := os.ReadFile(filepath.Join(rig.agentDir, "clean.log")); !strings.Contains(string(log), "request") {
		t.Errorf("the operator's clean command did not run: %q", log)
	}

	// The figures: release → drained → cleaning done → the next tenant active.
	runs := 10
	if n, err := strconv.Atoi(os.Getenv("NODUS_HANDOVER_RUNS")); err == nil && n > 0 {
		runs = n
	}
	current := "gamma/tenant-b"
	var toDrained, toCleaned, toNext []time.Duration
	for i := 0; i < runs; i++ {
		project, name := "acme", fmt.Sprintf("handover-%02d", i)
		if i%2 == 1 {
			project = "gamma"
		}
		owner := map[string]string{"acme": "ada", "gamma": "gus"}
		before := cleaningRequest(t, s)
		released := time.Now()
		if out, err := people.run(owner[strings.Split(current, "/")[0]], "release", current, "--yes"); err != nil {
			t.Fatalf("release %s: %v %s", current, err, out)
		}
		reserve(t, s, name, project, "{node: e2e-node}")
		// Each figure is when a poll first saw it (every poll is a kubectl
		// call, ~0.1 s); a step that happened between two polls counts at
		// the later one.
		var drained, cleaned, active time.Duration
		ns, host, _ := strings.Cut(current, "/")
		isDrained := func() bool {
			out, _, _ := s.kubectl("get", "reservedhost", host, "-n", ns, "-o", "jsonpath={.status.release.drainedAt}")
			return out != ""
		}
		isCleaned := func() bool {
			out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.cleaning.request} {.status.cleaning.phase}")
			return out == fmt.Sprintf("%d Succeeded", before+1)
		}
		waitOr(t, name+" to be active", func() bool {
			if drained == 0 && isDrained() {
				drained = time.Since(released)
			}
			if cleaned == 0 && isCleaned() {
				cleaned = time.Since(released)
			}
			state, _, _ := s.kubectl("get", "reservation", name, "-o", "jsonpath={.status.state}")
			if state != "active" {
				return false
			}
			active = time.Since(released)
			// Active: the predecessor must be drained and the node cleaned by now.
			if !isDrained() || !isCleaned() {
				t.Fatalf("%s is active while its predecessor's drain or the node's cleaning (request %d) is not done", name, before+1)
			}
			drained, cleaned = orAt(drained, active), orAt(cleaned, active)
			return true
		}, func() string { return handoverState(s, rig, ns, host, name) })
		toNext = append(toNext, active)
		toDrained, toCleaned = append(toDrained, drained), append(toCleaned, cleaned)
		current = project + "/" + name
	}
	owner := map[string]string{"acme": "ada", "gamma": "gus"}[strings.Split(current, "/")[0]]
	if out, err := people.run(owner, "release", current, "--yes", "--wait", "--timeout", "60s"); err != nil {
		t.Fatalf("release %s: %v %s", current, err, out)
	}
	t.Logf("handover over %d runs: release → drainedAt %s, → cleaning done %s, → next tenant active %s",
		runs, p50p99(toDrained), p50p99(toCleaned), p50p99(toNext))
}

// lastLogin is what lastlog(8) shows of login's last login, as any user of
// the host can read it.
func lastLogin(t *testing.T, login string) string {
	t.Helper()
	out, err := exec.Command("lastlog", "--user", login).CombinedOutput()
	if err != nil {
		t.Fatalf("lastlog --user %s: %v\n%s", login, err, out)
	}
	return string(out)
}

// sleepsStartedAfter says whether login runs a "sleep 600" that started
// no earlier than the process after (this run's session starts after its
// ssh client). Start times, not pids: pids wrap around within a CI run.
func sleepsStartedAfter(login string, after int) bool {
	since, ok := startTicks(after)
	if !ok {
		return false
	}
	for _, line := range strings.Split(running("-a", "-f", "-u", login, "sleep 600"), "\n") {
		pid, _, _ := strings.Cut(line, " ")
		if n, err := strconv.Atoi(pid); err == nil {
			if started, ok := startTicks(n); ok && started >= since {
				return true
			}
		}
	}
	return false
}

// startTicks is when pid started, in clock ticks since boot (proc(5),
// /proc/PID/stat field 22).
func startTicks(pid int) (uint64, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which is in parentheses, start
	// with the state, field 3.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(fields[19], 10, 64)
	return n, err == nil
}

// nodeDump shows the rig's node and the end of nodusd's log, for a failure.
func nodeDump(s *serverProcess, rig sshRig) func() string {
	return func() string {
		node, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "yaml")
		log := rig.agentLog.String()
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		return node + "\nnodusd:\n" + log
	}
}

// orAt is d, or at when d was not seen before.
func orAt(d, at time.Duration) time.Duration {
	if d == 0 {
		return at
	}
	return d
}

// atJobs counts the at jobs of login in the spool.
func atJobs(t *testing.T, login string) int {
	t.Helper()
	out, err := exec.Command("atq").Output()
	if err != nil {
		t.Fatalf("atq: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && fields[len(fields)-1] == login {
			n++
		}
	}
	return n
}

// cleaningRequest is the rig node's latest cleaning request number.
func cleaningRequest(t *testing.T, s *serverProcess) int64 {
	t.Helper()
	out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.cleaning.request}")
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	return int64(n)
}

// wayOutRuns measures, for each way a reservation's access ends other than
// a release — deletion, reassignment to another node, a login-user change —
// how long until the host refuses the certificate issued before it.
func wayOutRuns(t *testing.T, s *serverProcess, rig sshRig) {
	runs := 10
	if n, err := strconv.Atoi(os.Getenv("NODUS_WAYOUT_RUNS")); err == nil && n > 0 {
		runs = n
	}
	ways := []struct {
		name      string
		placement string
		end       func(t *testing.T, name string, i int)
	}{
		{"deletion", "{node: e2e-node}", func(t *testing.T, name string, _ int) {
			s.must(t, "delete", "reservation", name, "--wait=false")
		}},
		{"reassignment", "{allocation: %s}", func(t *testing.T, name string, i int) {
			// The operator moves the allocation to a spare node: maintenance
			// first, as for any active node's allocation.
			s.must(t, "patch", "node.nodus.dev", "e2e-node", "--type", "merge", "-p", `{"spec":{"maintenance":true}}`)
			s.must(t, "delete", "allocation", "alloc-"+name)
			s.apply(t, fmt.Sprintf("apiVersion: nodus.dev/v1\nkind: Allocation\nmetadata: {name: alloc-%s}\nspec: {node: spare-%s}\n", name, name), "create")
		}},
		// The node's login user is rig.login; the reservation now names another.
		{"login-user change", "{node: e2e-node}", func(t *testing.T, name string, _ int) {
			s.must(t, "patch", "reservation", name, "--type", "merge", "-p", `{"spec":{"loginUser":"`+rig.login2+`"}}`)
		}},
	}
	for _, way := range ways {
		var refused, sessions []time.Duration
		for i := 0; i < runs; i++ {
			name := fmt.Sprintf("%s-%02d", strings.Fields(way.name)[0], i)
			placement := way.placement
			if strings.Contains(placement, "%s") {
				s.apply(t, fmt.Sprintf("apiVersion: nodus.dev/v1\nkind: Node\nmetadata: {name: spare-%s}\nspec: {pool: e2e, resourceClass: gpu-e2e, loginUser: %s}\n", name, rig.login), "create")
				s.apply(t, fmt.Sprintf("apiVersion: nodus.dev/v1\nkind: Allocation\nmetadata: {name: alloc-%s}\nspec: {node: e2e-node}\n", name), "create")
				waitFor(t, "the allocation of "+name, func() bool {
					out, _, _ := s.kubectl("get", "allocation", "alloc-"+name, "-o", "jsonpath={.status.state}")
					return out == "active"
				})
				placement = fmt.Sprintf(placement, "alloc-"+name)
			}
			reserve(t, s, name, "acme", placement)
			login := certifiedLogin(t, s, rig, name)
			if err := login.run("true"); err != nil {
				t.Fatalf("%s: the certificate does not log in: %v\nnodusd: %s", name, err, rig.agentLog.String())
			}
			session := exec.Command("ssh", append(login.args, "sleep", "600")...)
			if err := session.Start(); err != nil {
				t.Fatal(err)
			}
			sessionEnded := make(chan time.Time, 1)
			go func() { _ = session.Wait(); sessionEnded <- time.Now() }()
			// Its own sleep, running: not one an earlier run left, nor a zombie.
			waitFor(t, "the session of "+name, func() bool {
				return strings.Contains(running("-a", "-f", "-u", rig.login, "sleep 600"), "sleep 600") && session.Process != nil &&
					sleepsStartedAfter(rig.login, session.Process.Pid)
			})
			ended := time.Now()
			way.end(t, name, i)
			dump := func() string {
				r, _, _ := s.kubectl("get", "reservation", name, "-o", "yaml")
				return r + nodeDump(s, rig)()
			}
			waitOr(t, "the old certificate to be refused after the "+way.name, func() bool { return login.run("true") != nil }, dump)
			refused = append(refused, time.Since(ended))
			select {
			case at := <-sessionEnded:
				sessions = append(sessions, at.Sub(ended))
			case <-time.After(30 * time.Second):
				t.Fatalf("the live session survived the %s:\n%s", way.name, dump())
			}
			// The node is cleaned after each way out before the next run claims it.
			waitOr(t, "e2e-node to be available again", func() bool {
				out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.provisionState}")
				return out == "available" || (way.name == "login-user change" && out == "active")
			}, nodeDump(s, rig))
			switch way.name {
			case "reassignment":
				s.must(t, "patch", "node.nodus.dev", "e2e-node", "--type", "merge", "-p", `{"spec":{"maintenance":false}}`)
				s.must(t, "delete", "reservation", name, "--wait=false")
			case "login-user change":
				s.must(t, "delete", "reservation", name, "--wait=false")
				waitOr(t, "e2e-node to be available again", func() bool {
					out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.provisionState}")
					return out == "available"
				}, nodeDump(s, rig))
			}
		}
		t.Logf("%s over %d runs: → the old certificate refused %s, → the live session ended %s", way.name, runs, p50p99(refused), p50p99(sessions))
	}
}

// certifiedLogin gets mia a certificate for reservation name once its host
// is connected, and returns a login with it (the system ssh, the pinned
// host key).
func certifiedLogin(t *testing.T, s *serverProcess, rig sshRig, name string) certLogin {
	t.Helper()
	var hostKey, loginUser string
	waitOr(t, name+" to be connected", func() bool {
		out, _, _ := s.kubectl("get", "reservedhost", name, "-n", "acme", "-o",
			`jsonpath={.status.conditions[?(@.type=="Connected")].status} {.status.connect.loginUser} {.status.connect.hostKey}`)
		fields := strings.SplitN(out, " ", 3)
		if len(fields) < 3 {
			return false
		}
		loginUser, hostKey = fields[1], fields[2]
		return fields[0] == "True"
	}, func() string { return handoverState(s, rig, "acme", name, name) })
	knownHosts := filepath.Join(rig.dir, "known_hosts-"+name)
	if err := os.WriteFile(knownHosts, []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", rig.port, hostKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(rig.dir, "id_"+name)
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
	pub, _ := os.ReadFile(key + ".pub")
	cfg, _ := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
	cfg.BearerToken = rig.tokens["mia"]
	cert, err := versioned.NewForConfigOrDie(cfg).NodusV1().ReservedHosts("acme").SSHCertificate(context.Background(), name,
		&nodusv1.ReservedHostSSHCertificate{PublicKey: string(pub)}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("certificate for %s: %v", name, err)
	}
	if err := os.WriteFile(key+"-cert.pub", []byte(cert.Certificate), 0o600); err != nil {
		t.Fatal(err)
	}
	return certLogin{args: []string{"-p", fmt.Sprint(rig.port), "-i", key, "-o", "CertificateFile=" + key + "-cert.pub",
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + knownHosts, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
		"-o", "ConnectTimeout=10", loginUser + "@127.0.0.1"}}
}

// certLogin is the system ssh with one certificate.
type certLogin struct{ args []string }

func (l certLogin) run(args ...string) error {
	return exec.Command("ssh", append(l.args, args...)...).Run()
}

// handoverState is what a handover that did not happen in time shows: the
// predecessor host's release, the next reservation, the rig node's
// cleaning and conditions, and the agent's log.
func handoverState(s *serverProcess, rig sshRig, ns, previous, next string) string {
	release, _, _ := s.kubectl("get", "reservedhost", previous, "-n", ns, "-o", "jsonpath={.status.reservation.state} {.status.release}")
	reservation, _, _ := s.kubectl("get", "reservation", next, "-o", "jsonpath={.status}")
	node, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.cleaning} {.status.conditions} {.status.reservation} {.status.appliedEpoch}")
	log := rig.agentLog.String()
	if len(log) > 16<<10 {
		log = "…" + log[len(log)-16<<10:]
	}
	return fmt.Sprintf("%s/%s: %s\nreservation %s: %s\nnode e2e-node: %s\nnodusd (the end of its log):\n%s", ns, previous, release, next, reservation, node, log)
}
