package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// lendingRun is lending as its three parties meet it, through the nodus CLI:
// the owner lends its host; a borrower's execution runs there as the
// borrower account and its output is in `logs`; a second, long one runs;
// the owner releases; the long one ends as drained before drainedAt
// appears, and the owner's SSH access is gone too.
func lendingRun(t *testing.T, s *serverProcess, rig sshRig) {
	s.apply(t, `apiVersion: nodus.dev/v1
kind: Project
metadata: {name: beta}
spec:
  members:
  - {name: bob, role: member}
---
apiVersion: nodus.dev/v1
kind: AccessToken
metadata: {name: bob}
spec: {user: bob}
`, "create")
	bobToken := strings.TrimSpace(s.must(t, "get", "accesstoken", "bob", "-o", "jsonpath={.status.token}"))
	if bobToken == "" {
		// The token is shown once, in the create answer: make another.
		bobToken = s.apply(t, "apiVersion: nodus.dev/v1\nkind: AccessToken\nmetadata: {name: bob-2}\nspec: {user: bob}\n", "create", "-o", "jsonpath={.status.token}")
	}
	s.must(t, "patch", "pool", "e2e", "--type", "merge", "-p", `{"spec":{"lending":{"open":true,"borrowers":[{"project":"beta","maxGPUs":0}]}}}`)

	people := newCustomers(t, s, filepath.Join(rig.dir, "lending-home"), map[string]string{"mia": rig.tokens["mia"], "ada": rig.tokens["ada"], "bob": bobToken})
	nodus := people.run
	reserve(t, s, "lent-host", "acme", "{node: e2e-node}")
	people.waitConnected(t, "mia", "acme/lent-host")
	if out, err := nodus("mia", "ssh", "acme/lent-host", "--", "id", "-un"); err != nil || strings.TrimSpace(out) != rig.login {
		t.Fatalf("the owner's ssh before lending: %v %q", err, out)
	}
	if slots := strings.TrimSpace(s.must(t, "get", "node", "e2e-node", "-o", "jsonpath={.status.executionSlots}")); slots != "2" {
		t.Errorf("nodusd with two borrower slots reports executionSlots %q", slots)
	}
	if out, err := nodus("ada", "lend", "acme/lent-host", "--max-executions", "3"); err == nil || !strings.Contains(out, "at most 2 at once") {
		t.Errorf("lending more executions than the host has slots: %v %s", err, out)
	}
	if out, err := nodus("bob", "lend", "acme/lent-host"); err == nil {
		t.Errorf("a borrower lent the owner's host: %s", out)
	}
	if out, err := nodus("ada", "lend", "acme/lent-host", "--max-executions", "2"); err != nil || !strings.Contains(out, "lent acme/lent-host into pool e2e") {
		t.Fatalf("nodus lend: %v %s", err, out)
	}

	// The first execution runs as the borrower account and succeeds.
	submit := func(script string) string {
		t.Helper()
		out, err := nodus("bob", "executions", "run", "-n", "beta", "--pool", "e2e", "--gpus", "0", "--", "sh", "-c", script)
		if err != nil || !strings.Contains(out, "submitted") {
			t.Fatalf("executions run: %v %s", err, out)
		}
		return strings.Fields(out)[1] // beta/NAME
	}
	phase := func(ref string) string {
		out, _ := nodus("bob", "executions", "get", ref)
		lines := strings.Split(out, "\n")
		if len(lines) < 2 {
			return ""
		}
		if f := strings.Fields(lines[1]); len(f) > 1 {
			return f[1]
		}
		return ""
	}
	first := submit(`echo "user=$(id -un) dir=$PWD gpus=[$CUDA_VISIBLE_DEVICES]"; echo done`)
	dump := func(ref string) string {
		out, _ := nodus("bob", "executions", "get", ref)
		return out + "\nnodusd:\n" + rig.agentLog.String()
	}
	waitOr(t, "the first execution to succeed", func() bool { return phase(first) == "succeeded" }, func() string { return dump(first) })
	logs, err := nodus("bob", "executions", "logs", first)
	if err != nil || !(strings.Contains(logs, "user="+rig.borrower+"-0 ") || strings.Contains(logs, "user="+rig.borrower+"-1 ")) ||
		!strings.Contains(logs, "gpus=[]") || !strings.Contains(logs, "done") {
		t.Fatalf("logs of the first execution: %v %q\nnodusd: %s", err, logs, rig.agentLog.String())
	}
	// In its sandbox the work directory is /work; on the host it is under
	// the executions directory, and gone once the execution ended.
	if !strings.Contains(logs, "dir=/work ") {
		t.Errorf("the execution's working directory in its sandbox: %q", logs)
	}
	if left, err := os.ReadDir(rig.executionsDir); err != nil || len(left) != 0 {
		t.Errorf("work directories outlived their executions: %v %v", err, left)
	}

	// The sandbox: nothing of the owner is within a borrower's reach.
	ownerHome := strings.TrimSpace(runOut(t, "sh", "-c", "getent passwd "+rig.login+" | cut -d: -f6"))
	secret := filepath.Join(ownerHome, "owner-secret.txt")
	if err := os.WriteFile(secret, []byte("owner-secret-data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(ownerHome, 0o755) // the default home mode of many distributions: others may read
	defer os.Remove(secret)
	servicePort, stopService, err := testhost.OwnerService("127.0.0.1:0", "owner-secret-data")
	if err != nil {
		t.Fatal(err)
	}
	defer stopService()
	probe := submit(fmt.Sprintf(`cat %s; bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && echo GET / >&3 && cat <&3 && echo reached-service';`+
		` test -e /proc/%d && echo sees-owner-processes; ls /home 2>&1; echo probe-end`, secret, servicePort, os.Getpid()))
	waitOr(t, "the probing execution to end", func() bool { p := phase(probe); return p == "succeeded" || p == "failed" }, func() string { return dump(probe) })
	probed, _ := nodus("bob", "executions", "logs", probe)
	if !strings.Contains(probed, "probe-end") || strings.Contains(probed, "owner-secret-data") || strings.Contains(probed, "reached-service") ||
		strings.Contains(probed, "sees-owner-processes") {
		t.Errorf("a borrower's execution reached the owner's files, services or processes:\n%s", probed)
	}

	// With the pool's network policy egress, the owner's service on the
	// host's own address stays out of reach.
	s.must(t, "patch", "pool", "e2e", "--type", "merge", "-p", `{"spec":{"lending":{"network":"egress"}}}`)
	hostIPs := testhost.IPv4s()
	widePort, stopWide, err := testhost.OwnerService("0.0.0.0:0", "owner-secret-data")
	if err != nil {
		t.Fatal(err)
	}
	defer stopWide()
	var reach strings.Builder
	for _, ip := range append([]string{"127.0.0.1"}, hostIPs...) {
		fmt.Fprintf(&reach, `timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d && echo GET / >&3 && cat <&3' && echo reached-%s; `, ip, widePort, ip)
	}
	egress := submit(reach.String() + "grep -c nameserver /etc/resolv.conf; echo egress-end")
	waitOr(t, "the egress execution to end", func() bool { p := phase(egress); return p == "succeeded" || p == "failed" }, func() string { return dump(egress) })
	if out, _ := nodus("bob", "executions", "logs", egress); !strings.Contains(out, "egress-end") || strings.Contains(out, "owner-secret-data") ||
		strings.Contains(out, "reached-") {
		t.Errorf("an egress execution reached the host (%v):\n%s\nnodusd: %s", hostIPs, out, rig.agentLog.String())
	}
	s.must(t, "patch", "pool", "e2e", "--type", "merge", "-p", `{"spec":{"lending":{"network":"none"}}}`)

	// An execution given one of the host's GPUs opens that one as far as
	// the driver (none here), and the device cgroup refuses the other even
	// where a node of it is within reach: planted by root in its /work.
	if rig.gpus == 2 {
		s.must(t, "patch", "pool", "e2e", "--type", "merge", "-p", `{"spec":{"lending":{"borrowers":[{"project":"beta","maxGPUs":2}]}}}`)
		out, err := nodus("bob", "executions", "run", "-n", "beta", "--pool", "e2e", "--gpus", "1", "--", "sh", "-c",
			`echo "visible=[$CUDA_VISIBLE_DEVICES] dev=[$(ls /dev | grep nvidia | tr '\n' ' ')]"; while [ ! -e /work/planted ]; do sleep 0.05; done; `+
				`for g in 0 1; do head -c1 /work/gpu$g 2>&1 | sed "s/^/gpu$g: /"; done; echo gpu-end`)
		if err != nil || !strings.Contains(out, "submitted") {
			t.Fatalf("executions run --gpus 1: %v %s", err, out)
		}
		ref := strings.Fields(out)[1]
		uid := strings.TrimSpace(s.must(t, "get", "execution", strings.TrimPrefix(ref, "beta/"), "-n", "beta", "-o", "jsonpath={.metadata.uid}"))
		work := filepath.Join(rig.executionsDir, uid)
		waitOr(t, "the GPU execution's work directory", func() bool { _, err := os.Stat(work); return err == nil }, func() string { return dump(ref) })
		for g := range uint32(2) {
			if err := testhost.MakeNVIDIANode(filepath.Join(work, fmt.Sprintf("gpu%d", g)), g); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(work, "planted"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitOr(t, "the GPU execution to succeed", func() bool { return phase(ref) == "succeeded" }, func() string { return dump(ref) })
		logs, _ := nodus("bob", "executions", "logs", ref)
		given, other := "0", "1"
		if strings.Contains(logs, "visible=[1]") {
			given, other = "1", "0"
		}
		opened := func(g string) string {
			for _, line := range strings.Split(logs, "\n") {
				if rest, ok := strings.CutPrefix(line, "gpu"+g+": "); ok {
					return rest
				}
			}
			return ""
		}
		switch {
		case !strings.Contains(logs, "visible=["+given+"]") || !strings.Contains(logs, "gpu-end"):
			t.Errorf("an execution of one GPU:\n%s", logs)
		case !strings.Contains(logs, "dev=[nvidia"+given+" nvidiactl ]"):
			t.Errorf("the sandbox's /dev must hold its GPU and nvidiactl only:\n%s", logs)
		case !strings.HasSuffix(opened(given), "No such device or address"):
			t.Errorf("the assigned GPU must open as far as the driver (ENXIO):\n%s", logs)
		case !strings.HasSuffix(opened(other), "Operation not permitted"):
			t.Errorf("the device cgroup must refuse the GPU the execution was not given (EPERM):\n%s", logs)
		default:
			t.Logf("an execution given GPU %s of 2 opened it as far as the (absent) driver; the device cgroup refused GPU %s", given, other)
		}
	}

	// An execution may name an image of the host's images directory, which
	// then is its root; one the host does not have fails as such.
	inImage := func(image, script string) string {
		t.Helper()
		out, err := nodus("bob", "executions", "run", "-n", "beta", "--pool", "e2e", "--gpus", "0", "--image", image, "--", "sh", "-c", script)
		if err != nil || !strings.Contains(out, "submitted") {
			t.Fatalf("executions run --image %s: %v %s", image, err, out)
		}
		ref := strings.Fields(out)[1]
		waitOr(t, "the execution in image "+image+" to end", func() bool { p := phase(ref); return p == "succeeded" || p == "failed" }, func() string { return dump(ref) })
		return ref
	}
	if rig.withImages {
		ref := inImage("tiny:v1", "cat /etc/os-release; ls /usr 2>&1; echo image-end")
		if out, _ := nodus("bob", "executions", "logs", ref); !strings.Contains(out, "ID=nodus-tiny") || !strings.Contains(out, "image-end") ||
			strings.Contains(out, "debian") {
			t.Errorf("an execution in image tiny:v1:\n%s", out)
		}
	}
	if out, _ := nodus("bob", "executions", "get", inImage("absent", "true")); !strings.Contains(out, "ImageNotFound") {
		t.Errorf("an execution in an image the host does not have: %s", out)
	}

	// A stop does not wait for a sandbox being prepared. The image slow:v1
	// is an archive whose bytes never come (a FIFO nothing writes to: tar
	// waits for it as for a disk that hangs), and its execution is
	// cancelled while the host prepares it: it ends at once, tar still
	// waiting.
	if rig.withImages {
		archive := filepath.Join(rig.dir, "images", "slow.tar")
		if err := syscall.Mkfifo(archive, 0o644); err != nil {
			t.Fatal(err)
		}
		// Whatever happens, tar gets its end: blocked, it would hold every
		// later image's preparation on this host.
		release := func() {
			if f, err := os.OpenFile(archive, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
		}
		t.Cleanup(func() { release(); _ = os.Remove(archive) })
		out, err := nodus("bob", "executions", "run", "-n", "beta", "--pool", "e2e", "--gpus", "0", "--image", "slow:v1", "--", "true")
		if err != nil || !strings.Contains(out, "submitted") {
			t.Fatalf("executions run --image slow:v1: %v %s", err, out)
		}
		slow := strings.Fields(out)[1]
		unpacking := func() bool { return running("-f", "tar -xf "+archive) != "" }
		waitOr(t, "the host to read the slow image's archive", func() bool { return phase(slow) == "running" && unpacking() }, func() string { return dump(slow) })
		if out, err := nodus("bob", "executions", "cancel", slow); err != nil {
			t.Errorf("executions cancel of an execution being prepared: %v %s", err, out)
		}
		waitOr(t, "the execution being prepared to be cancelled", func() bool { return phase(slow) == "cancelled" }, func() string { return dump(slow) })
		if !unpacking() {
			t.Errorf("the slow image's archive is no longer read: the cancel was not shown to end before its preparation")
		}
		// The archive ends (empty): the abandoned preparation fails alone.
		release()
		waitOr(t, "the abandoned preparation to end", func() bool { return !unpacking() }, func() string { return rig.agentLog.String() })
		_ = os.Remove(archive)
	}

	// Lending 256 MiB for two executions at once gives each 128 MiB; one
	// that takes more is stopped at its limit and says so.
	if out, err := nodus("ada", "lend", "acme/lent-host", "--max-executions", "2", "--memory", "256Mi"); err != nil ||
		!strings.Contains(out, "256Mi of memory") {
		t.Fatalf("lending 256 MiB: %v %s", err, out)
	}
	hog := submit(`head -c 1000000000 /dev/zero | tail -n 1 > /dev/null; echo survived`)
	waitOr(t, "the memory hog to end", func() bool { p := phase(hog); return p == "succeeded" || p == "failed" }, func() string { return dump(hog) })
	if out, _ := nodus("bob", "executions", "get", hog); !strings.Contains(out, "OutOfMemory") {
		t.Errorf("an execution over its memory limit: %s", out)
	}
	if out, _ := nodus("bob", "executions", "get", first); strings.Contains(out, "e2e-node") || strings.Contains(out, "acme") {
		t.Errorf("the borrower sees the owner or the node: %s", out)
	}

	// The maximum runtime is enforced, and a borrower cancels a running one.
	limited, err := nodus("bob", "executions", "run", "-n", "beta", "--pool", "e2e", "--gpus", "0", "--max-runtime", "1", "--", "sleep", "600")
	if err != nil {
		t.Fatalf("executions run: %v %s", err, limited)
	}
	limitedRef := strings.Fields(limited)[1]
	waitOr(t, "the maximum runtime to end an execution", func() bool { return phase(limitedRef) == "failed" }, func() string { return dump(limitedRef) })
	if out, _ := nodus("bob", "executions", "get", limitedRef); !strings.Contains(out, "MaxRuntimeExceeded") {
		t.Errorf("an execution over its maximum runtime: %s", out)
	}
	cancelled := submit(`echo waiting; sleep 600`)
	waitOr(t, "the execution to cancel to run", func() bool { return phase(cancelled) == "running" }, func() string { return dump(cancelled) })
	if out, err := nodus("bob", "executions", "cancel", cancelled); err != nil || !strings.Contains(out, "being stopped") {
		t.Errorf("executions cancel of a running execution: %v %s", err, out)
	}
	waitOr(t, "the running execution to be cancelled", func() bool { return phase(cancelled) == "cancelled" }, func() string { return dump(cancelled) })
	waitOr(t, "the cancelled execution's processes to end", func() bool { return borrowerProcs(rig, "") == "" },
		func() string { return borrowerProcs(rig, "") })

	// What an execution leaves running, even outside its process group and
	// holding the execution's output open, ends with it.
	leaver := submit(`setsid sleep 600 & echo left-behind`)
	waitOr(t, "the leaving execution to succeed", func() bool { return phase(leaver) == "succeeded" }, func() string { return dump(leaver) })
	if out := borrowerProcs(rig, "sleep"); out != "" {
		t.Errorf("a process the execution left behind outlived it: %s", out)
	}

	// Measured, not asserted: create → running and create → succeeded of
	// a trivial execution in its runc sandbox, as the operator's watch sees it.
	toRunning, toDone := measureExecutions(t, s, func() string { return submit(`true`) }, 8)
	t.Logf("over 8 sandboxed executions of true, from nodus executions run: → running %s, → succeeded %s", p50p99(toRunning), p50p99(toDone))
	// …and the same without the sandbox, from nodusd restarted with
	// --sandbox none and back: what the sandbox costs, in the same run.
	rig.agent.stop()
	rig.agent.start(t, "--sandbox", "none")
	warm := submit(`true`)
	waitOr(t, "an execution on the unsandboxed nodusd", func() bool { return phase(warm) == "succeeded" }, func() string { return dump(warm) })
	plainRunning, plainDone := measureExecutions(t, s, func() string { return submit(`true`) }, 8)
	t.Logf("over 8 executions of true without a sandbox (--sandbox none), same run: → running %s, → succeeded %s", p50p99(plainRunning), p50p99(plainDone))
	rig.agent.stop()
	rig.agent.start(t)
	warm = submit(`id -un`)
	waitOr(t, "an execution on the sandboxed nodusd again", func() bool { return phase(warm) == "succeeded" }, func() string { return dump(warm) })

	// The second runs until the release drains it.
	second := submit(`echo started; sleep 600`)
	waitOr(t, "the long execution to run", func() bool {
		return phase(second) == "running" && borrowerProcs(rig, "sleep") != ""
	}, func() string { return dump(second) })
	if out, _ := nodus("ada", "lending", "-n", "acme"); !strings.Contains(out, "acme/lent-host") || !strings.Contains(out, " lent ") {
		t.Errorf("nodus lending: %s", out)
	}
	waitFor(t, "the owner to see one execution on its host", func() bool {
		out, _ := nodus("ada", "lending", "-n", "acme")
		return strings.Contains(out, "1/2")
	})
	releasedAt := time.Now()
	if out, err := nodus("ada", "release", "acme/lent-host", "--yes", "--wait", "--timeout", "60s"); err != nil || !strings.Contains(out, "drained after") {
		t.Fatalf("nodus release --wait: %v\n%s", err, out)
	}
	t.Logf("release of a host running a sandboxed execution → drained, as nodus release --wait saw it: %s", time.Since(releasedAt).Round(time.Millisecond))
	if got := phase(second); got != "drained" {
		out, _ := nodus("bob", "executions", "get", second)
		t.Fatalf("the long execution after the release: %s\n%s", got, out)
	}
	if out := borrowerProcs(rig, ""); out != "" {
		t.Errorf("borrower processes survive the drain: %s", out)
	}
	finished := strings.TrimSpace(s.must(t, "get", "execution", strings.TrimPrefix(second, "beta/"), "-n", "beta", "-o", "jsonpath={.status.finishedAt}"))
	drained := strings.TrimSpace(s.must(t, "get", "reservedhost", "lent-host", "-n", "acme", "-o", "jsonpath={.status.release.drainedAt}"))
	finishedAt, err1 := time.Parse(time.RFC3339, finished)
	drainedAt, err2 := time.Parse(time.RFC3339, drained)
	if err1 != nil || err2 != nil || drainedAt.Before(finishedAt) {
		t.Errorf("drainedAt %q must come after the execution ended at %q", drained, finished)
	}
	if logs, _ := nodus("bob", "executions", "logs", second); !strings.Contains(logs, "started") {
		t.Errorf("the drained execution's output: %q", logs)
	}
	if out, err := nodus("mia", "ssh", "acme/lent-host", "--", "true"); err == nil || !strings.Contains(out, "no access now") {
		t.Errorf("the owner's ssh after the release: %v %q", err, out)
	}
	if out, _ := nodus("ada", "lending", "-n", "acme"); !strings.Contains(out, " ended ") {
		t.Errorf("lending after the release: %s", out)
	}

	// A reservation deleted while a borrower runs hands its node to
	// cleaning at once, with no release to wait for: the cleaning waits
	// until the borrowers' executions ended, or the next tenant gets a host
	// they still run on. With a grace long enough to tell (8 s), an
	// execution that ignores SIGTERM outlives a cleaning that does not wait.
	rig.agent.stop()
	rig.agent.start(t, "--grace", "8s")
	defer func() { rig.agent.stop(); rig.agent.start(t) }()
	reserve(t, s, "lent-again", "acme", "{node: e2e-node}")
	people.waitConnected(t, "mia", "acme/lent-again")
	if out, err := nodus("ada", "lend", "acme/lent-again", "--max-executions", "2"); err != nil {
		t.Fatalf("nodus lend acme/lent-again: %v %s", err, out)
	}
	stubborn := submit(`trap "" TERM; echo started; sleep 600`)
	waitOr(t, "the execution that ignores SIGTERM to run", func() bool {
		return phase(stubborn) == "running" && borrowerProcs(rig, "sleep") != ""
	}, func() string { return dump(stubborn) })
	s.must(t, "delete", "reservation", "lent-again", "--wait=false")
	waitOr(t, "e2e-node to be available after the deletion", func() bool {
		out, _, _ := s.kubectl("get", "node.nodus.dev", "e2e-node", "-o", "jsonpath={.status.provisionState}")
		return out == "available"
	}, nodeDump(s, rig))
	if out := borrowerProcs(rig, "sleep"); out != "" {
		t.Errorf("a borrower's execution outlived the cleaning of its host: %s\nnodusd: %s", out, rig.agentLog.String())
	}
	waitOr(t, "the stubborn execution to end drained", func() bool { return phase(stubborn) == "drained" }, func() string { return dump(stubborn) })
	noBorrowerLogged(t, s, rig)
}

// noBorrowerLogged checks that nodusd's log names none of the borrower
// project's executions, nor the project: it goes to the system journal,
// which the adm and systemd-journal groups read (the owner's login user
// may be in one), and names a borrower's execution by its UID only, which
// keeps from the owner which projects borrow where the pool does not show
// them.
func noBorrowerLogged(t *testing.T, s *serverProcess, rig sshRig) {
	t.Helper()
	names := strings.Fields(s.must(t, "get", "executions", "-n", "beta", "-o", "jsonpath={.items[*].metadata.name}"))
	for line := range strings.SplitSeq(rig.agentLog.String(), "\n") {
		named := strings.Contains(line, "beta/") || strings.Contains(line, `"beta"`) || strings.Contains(line, "namespace=beta")
		for _, name := range names {
			named = named || strings.Contains(line, name)
		}
		if named {
			t.Errorf("nodusd's log names a borrower (project beta, executions %v): %s", names, line)
		}
	}
}

// waitOr waits like waitFor and says what dump shows when it times out.
func waitOr(t *testing.T, what string, ok func() bool, dump func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, dump())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// borrowerProcs lists the processes of the host's borrower accounts whose
// name matches pattern (all with ""), one "PID COMMAND" per line.
func borrowerProcs(rig sshRig, pattern string) string {
	var out []string
	for _, account := range []string{rig.borrower + "-0", rig.borrower + "-1"} {
		args := []string{"-l", "-u", account}
		if pattern != "" {
			args = append(args, pattern)
		}
		if s := running(args...); s != "" {
			out = append(out, account+": "+s)
		}
	}
	return strings.Join(out, "\n")
}

// running is what pgrep args finds, less zombies: a process that exited
// runs nothing, whether or not its parent (here, often a PID 1 that does
// not reap) has collected it yet.
func running(args ...string) string {
	found, _ := exec.Command("pgrep", args...).Output()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(found)), "\n") {
		pid, _, _ := strings.Cut(line, " ")
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if line == "" || err != nil {
			continue // gone meanwhile
		}
		// The state follows the command name, which is in parentheses.
		if rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:]); strings.HasPrefix(strings.TrimSpace(rest), "Z") {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// measureExecutions submits n executions one after the other and returns,
// for each, how long from its creation until the operator's watch saw it
// running and succeeded.
func measureExecutions(t *testing.T, s *serverProcess, submit func() string, n int) (toRunning, toDone []time.Duration) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	w, err := versioned.NewForConfigOrDie(cfg).NodusV1().Executions("beta").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type seen struct{ running, done time.Time }
	var mu sync.Mutex
	times := map[string]*seen{}
	go func() {
		for ev := range w.ResultChan() {
			e, ok := ev.Object.(*nodusv1.Execution)
			if !ok {
				continue
			}
			mu.Lock()
			st := times[e.Name]
			if st == nil {
				st = &seen{}
				times[e.Name] = st
			}
			switch {
			case e.Status.Phase == nodusv1.ExecutionRunning && st.running.IsZero():
				st.running = time.Now()
			case e.Status.Phase == nodusv1.ExecutionSucceeded && st.done.IsZero():
				st.done = time.Now()
			}
			mu.Unlock()
		}
	}()
	for range n {
		created := time.Now()
		name := strings.TrimPrefix(submit(), "beta/")
		waitFor(t, "a measured execution to succeed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return times[name] != nil && !times[name].done.IsZero()
		})
		mu.Lock()
		toRunning, toDone = append(toRunning, times[name].running.Sub(created)), append(toDone, times[name].done.Sub(created))
		mu.Unlock()
	}
	return toRunning, toDone
}
