package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
	"github.com/nodus-dev/nodus/pkg/testhost"
)

// nobody is the unprivileged account the tests run sandboxes as.
const nobody = 65534

// runtimeForTest is a real runc runtime, or a skip where one cannot exist:
// runc needs root (CI is root and installs runc).
func runtimeForTest(t *testing.T) *Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runc sandboxes need root")
	}
	rt, err := Find(t.TempDir())
	if err != nil {
		t.Skip(err.Error())
	}
	rt.CgroupParent = "/nodus-sandbox-test"
	return rt
}

// safeBuffer is output written by runc while the test reads it
// (testfleet.SyncBuffer's: testfleet imports the agent, which imports this
// package).
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// workDir is a work directory of the unprivileged account.
func workDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	// The test's temporary directories are 0700 root: let the account pass.
	for d := filepath.Dir(dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o711)
	}
	return dir
}

// run runs script with /bin/sh in a sandbox of spec and returns its output and exit.
func run(t *testing.T, rt *Runtime, spec Spec, script string) (string, error, *Sandbox) {
	t.Helper()
	if spec.ID == "" {
		spec.ID = fmt.Sprintf("t%d", time.Now().UnixNano())
	}
	if spec.HostWorkDir == "" {
		spec.HostWorkDir = workDir(t)
	}
	spec.Args = []string{"/bin/sh", "-c", script}
	spec.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + WorkDir}
	spec.UID, spec.GID = nobody, nobody
	out := &safeBuffer{}
	sb, err := rt.Start(spec, out)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sb.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(60 * time.Second):
		_ = sb.Signal(syscall.SIGKILL)
		t.Fatalf("the sandbox did not end: %s", out.String())
	}
	t.Cleanup(func() { _ = sb.Close() })
	return out.String(), err, sb
}

// TestSandboxIsolatesFromTheOwner: an execution reads nothing of the
// owner's files, reaches none of the host's loopback services and sees
// none of the host's processes.
func TestSandboxIsolatesFromTheOwner(t *testing.T) {
	rt := runtimeForTest(t)
	// The owner's secret, readable by everyone on the host.
	home := t.TempDir()
	secret := filepath.Join(home, "secret.txt")
	if err := os.WriteFile(secret, []byte("owner-data"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(home, 0o755)
	// The owner's service on the host's loopback.
	port, stop, err := testhost.OwnerService("127.0.0.1:0", "owner-data")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	for what, script := range map[string]string{
		"a file of the owner": "cat " + secret,
		"/home":               "ls /home",
		"/root":               "ls /root",
		"the agent's state":   "ls /var/lib/nodusd",
		"sshd's host keys":    "cat /etc/ssh/ssh_host_ed25519_key.pub",
		"a loopback service":  fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && echo GET / >&3 && cat <&3", port),
		"the host's process":  fmt.Sprintf("test -e /proc/%d && cat /proc/%d/cmdline", os.Getpid(), os.Getpid()),
	} {
		if strings.Contains(what, "loopback") {
			script = "bash -c '" + script + "'"
		}
		out, err, _ := run(t, rt, Spec{}, script)
		if err == nil || strings.Contains(out, "owner-data") || strings.Contains(out, "ssh-ed25519") || strings.Contains(out, "sandbox.test") {
			t.Errorf("the sandbox reached %s: %v %q", what, err, out)
		}
	}
	// What it may do: write its work directory and /tmp, read the system.
	out, err, _ := run(t, rt, Spec{}, "echo hi > /work/f && echo tmp > /tmp/f && cat /work/f /tmp/f /etc/os-release >/dev/null && id -u && echo /proc/[0-9]*")
	if err != nil || !strings.HasPrefix(out, "65534\n") {
		t.Errorf("an ordinary execution: %v %q", err, out)
	}
	// The shell's glob and echo run in the shell itself, so the only process
	// left to see is the execution's own shell, pid 1 of its namespace.
	// (Counting with "ls /proc | grep" raced: ls could finish before sh had
	// started grep, and CI saw two processes instead of three.)
	if fields := strings.Fields(out); len(fields) != 2 || fields[1] != "/proc/1" {
		t.Errorf("the sandbox sees other processes than its own shell: %q", out)
	}
	if out, err, _ := run(t, rt, Spec{}, "touch /usr/x || touch /etc/x"); err == nil {
		t.Errorf("the system directories are writable: %q", out)
	}
	// The node's name: the host's /etc/hostname and /etc/hosts carry it,
	// and /etc/machine-id tells the machine apart.
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	out, err, _ = run(t, rt, Spec{}, "hostname; cat /etc/hostname /etc/hosts; cat /etc/machine-id 2>/dev/null; getent hosts localhost")
	if err != nil || slices.Contains(strings.Fields(out), name) || !strings.HasPrefix(out, Hostname+"\n"+Hostname+"\n") || !strings.Contains(out, "::1") {
		t.Errorf("the sandbox's host name and hosts (the host is %q): %v %q", name, err, out)
	}
	if id, err := os.ReadFile("/etc/machine-id"); err == nil && len(strings.TrimSpace(string(id))) > 0 && strings.Contains(out, strings.TrimSpace(string(id))) {
		t.Errorf("the sandbox reads the host's machine-id: %q", out)
	}
}

// TestSandboxLimits: the memory limit stops an execution (and says so),
// and the pids limit bounds a fork bomb.
func TestSandboxLimits(t *testing.T) {
	rt := runtimeForTest(t)
	out, err, sb := run(t, rt, Spec{MemoryBytes: 64 << 20}, "head -c 400000000 /dev/zero | tail -n 1 > /dev/null")
	if err == nil || !sb.OOMKilled() {
		t.Errorf("allocating 400 MB under a 64 MiB limit: %v, OOM-killed %v: %q", err, sb.OOMKilled(), out)
	}
	out, err, sb = run(t, rt, Spec{MemoryBytes: 64 << 20}, "head -c 1000 /dev/zero | tail -n 1 > /dev/null")
	if err != nil || sb.OOMKilled() {
		t.Errorf("a small execution under the limit: %v %v %q", err, sb.OOMKilled(), out)
	}
	out, _, _ = run(t, rt, Spec{Pids: 20}, "for i in $(seq 40); do sleep 5 & done 2>&1; wait")
	if !strings.Contains(out, "fork") && !strings.Contains(out, "Resource temporarily unavailable") {
		t.Errorf("40 processes under a pids limit of 20: %q", out)
	}
	// No core dump: where the host pipes them to systemd-coredump, a root
	// helper outside the sandbox would keep the crashed process's memory
	// (its environment with it) on the host, in files and a journal the
	// execution's cleaning never sees. Nodusd's own limit (systemd's soft 0,
	// hard unlimited) would let the execution raise it: so is this test's.
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &limit); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{Cur: 0, Max: ^uint64(0)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_CORE, &limit) })
	out, err, _ = run(t, rt, Spec{}, "ulimit -H -c; (ulimit -c unlimited) 2>/dev/null && echo raised; true")
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("an execution's core dump limit (want a hard limit of 0 it cannot raise): %v %q", err, out)
	}
}

// TestSandboxGPUs: only the given GPU's node is in the sandbox, and the
// device cgroup refuses an unassigned GPU even where a node of it exists.
func TestSandboxGPUs(t *testing.T) {
	rt := runtimeForTest(t)
	dev := t.TempDir()
	mknod := func(path string, minor uint32) {
		t.Helper()
		if err := testhost.MakeNVIDIANode(path, minor); err != nil {
			t.Fatal(err)
		}
	}
	mknod(filepath.Join(dev, "nvidia0"), 0)
	mknod(filepath.Join(dev, "nvidia1"), 1)
	mknod(filepath.Join(dev, "nvidiactl"), 255)
	rt.DevDir = dev
	rt.DriverDir = filepath.Join(dev, "no-driver") // indices are minors
	work := workDir(t)
	// A node of the unassigned GPU where the sandbox can reach it (only a
	// host's root can put one there): the cgroup, not its absence, refuses.
	mknod(filepath.Join(work, "nvidia1"), 1)

	// Opening the assigned GPU reaches the driver: without one the kernel
	// answers ENXIO; a loaded driver refuses a plain read with EINVAL.
	reached := "/dev/nvidia0: No such device or address"
	if _, err := nvidiagpus.List(nvidiagpus.DriverDir); err == nil {
		reached = "/dev/nvidia0: Invalid argument"
	}

	out, _, _ := run(t, rt, Spec{GPUs: []int32{0}, HostWorkDir: work},
		"ls /dev; cat /dev/nvidia0 2>&1; cat /dev/nvidia1 2>&1; cat /work/nvidia1 2>&1; true")
	switch {
	case !strings.Contains(out, "nvidia0") || !strings.Contains(out, "nvidiactl"):
		t.Errorf("the assigned GPU is missing: %q", out)
	case !strings.Contains(out, reached):
		t.Errorf("opening the assigned GPU must reach the driver (%q), not a refusal: %q", reached, out)
	case !strings.Contains(out, "/dev/nvidia1: No such file or directory"):
		t.Errorf("the unassigned GPU's node is in the sandbox: %q", out)
	case !strings.Contains(out, "/work/nvidia1: Operation not permitted"):
		t.Errorf("the device cgroup must refuse the unassigned GPU with EPERM: %q", out)
	}
	if _, err := (&Runtime{DevDir: dev, DriverDir: rt.DriverDir}).Config(Spec{UID: nobody, GPUs: []int32{7}}, "/rootfs", "", "", ""); err == nil {
		t.Error("a GPU the host does not have was accepted")
	}
}

// TestSandboxGPUsByTheDriversMinor: the driver numbers its device nodes in
// the order it probed the GPUs, which need not be the PCI bus order the
// GPUs' indices count in: GPU 0 (the lowest bus id) may be /dev/nvidia1.
// The sandbox gets, and its device cgroup allows, the node of the GPU
// assigned, by the driver's own list.
func TestSandboxGPUsByTheDriversMinor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make device nodes (CI runs as root)")
	}
	dev, driver := t.TempDir(), t.TempDir()
	for _, n := range []struct {
		node  string
		minor uint32
	}{{"nvidia0", 0}, {"nvidia1", 1}, {"nvidiactl", 255}} {
		if err := testhost.MakeNVIDIANode(filepath.Join(dev, n.node), n.minor); err != nil {
			t.Fatal(err)
		}
	}
	for bus, minor := range map[string]string{"0000:1a:00.0": "1", "0000:3B:00.0": "0"} {
		if err := os.MkdirAll(filepath.Join(driver, bus), 0o755); err != nil {
			t.Fatal(err)
		}
		info := "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-x\nDevice Minor: \t " + minor + "\nBus Location: \t " + bus + "\n"
		if err := os.WriteFile(filepath.Join(driver, bus, "information"), []byte(info), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	rt := &Runtime{DevDir: dev, DriverDir: driver}
	for index, want := range map[int32]int64{0: 1, 1: 0} {
		cfg, err := rt.Config(Spec{UID: nobody, GPUs: []int32{index}}, "/rootfs", "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		var nodes []string
		var minors []int64
		for _, d := range cfg.Linux.Devices {
			if isGPUNode(strings.TrimPrefix(d.Path, "/dev/")) {
				nodes, minors = append(nodes, d.Path), append(minors, d.Minor)
			}
		}
		allowed := false
		for _, r := range cfg.Linux.Resources.Devices {
			if r.Allow && r.Minor != nil && *r.Minor == want && r.Major != nil && *r.Major == nvidiaMajor {
				allowed = true
			}
			if r.Allow && r.Minor != nil && *r.Minor == 1-want && r.Major != nil && *r.Major == nvidiaMajor {
				t.Errorf("GPU %d: the other GPU's minor %d is allowed too", index, 1-want)
			}
		}
		if len(minors) != 1 || minors[0] != want || !allowed {
			t.Errorf("GPU %d: device nodes %v minors %v (allowed %v), want /dev/nvidia%d", index, nodes, minors, allowed, want)
		}
	}
	if _, err := rt.Config(Spec{UID: nobody, GPUs: []int32{2}}, "/rootfs", "", "", ""); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a GPU the driver does not list: %v", err)
	}
}

// TestSandboxEndsEverything: what an execution starts with setsid or a
// double fork ends with it, and a signal reaches every process.
func TestSandboxEndsEverything(t *testing.T) {
	rt := runtimeForTest(t)
	marker := fmt.Sprintf("%d", 100000+time.Now().UnixNano()%100000)
	_, err, _ := run(t, rt, Spec{}, "setsid sleep "+marker+" & (sleep "+marker+" &) ; sleep 0.3; exit 0")
	if err != nil {
		t.Fatalf("the execution: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := processesWith("sleep " + marker); n != 0 {
		t.Errorf("%d processes the execution left behind still run", n)
	}

	endsOnKill(t, sleepers(t, rt, "t-signal", marker), marker)
}

// sleepers starts a sandbox of two sleeps of marker, one in a session of
// its own, and returns it once both run.
func sleepers(t *testing.T, rt *Runtime, id, marker string) *Sandbox {
	t.Helper()
	out := &safeBuffer{}
	sb, err := rt.Start(Spec{ID: id, Args: []string{"/bin/sh", "-c", "setsid sleep " + marker + " & sleep " + marker},
		Env: []string{"PATH=/usr/bin:/bin"}, UID: nobody, GID: nobody, HostWorkDir: workDir(t)}, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	time.Sleep(500 * time.Millisecond)
	if n := processesWith("sleep " + marker); n != 2 {
		t.Fatalf("%d processes run, want 2: %s", n, out.String())
	}
	return sb
}

// endsOnKill sends sb SIGKILL and wants it ended, no sleep of marker left.
func endsOnKill(t *testing.T, sb *Sandbox, marker string) {
	t.Helper()
	waited := make(chan error, 1)
	go func() { waited <- sb.Wait() }()
	if err := sb.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("a killed sandbox did not end")
	}
	if n := processesWith("sleep " + marker); n != 0 {
		t.Errorf("%d processes outlived the kill", n)
	}
}

// TestSandboxIsKilledWhenRuncCannotKill: runc's kill fails (here a wrapper
// around the real runc refuses it; a damaged state directory does the
// same): a SIGKILL must still end every process of the sandbox, or an
// execution outlives its maximum runtime and its cancel.
func TestSandboxIsKilledWhenRuncCannotKill(t *testing.T) {
	rt := runtimeForTest(t)
	wrapper := filepath.Join(t.TempDir(), "runc")
	script := "#!/bin/sh\nfor a in \"$@\"; do if [ \"$a\" = kill ]; then echo 'injected: runc kill fails' >&2; exit 1; fi; done\nexec " + rt.Binary + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rt.Binary = wrapper
	marker := fmt.Sprintf("%d", 100000+time.Now().UnixNano()%100000)
	sb := sleepers(t, rt, fmt.Sprintf("t-nokill-%d", time.Now().UnixNano()), marker)
	if err := sb.Signal(syscall.SIGTERM); err == nil {
		t.Error("a SIGTERM runc failed to send is reported sent")
	}
	endsOnKill(t, sb, marker)
}

// processesWith counts the host's processes whose command line is cmdline.
func processesWith(cmdline string) int {
	out, _ := exec.Command("pgrep", "-c", "-f", "^"+cmdline+"$").Output()
	n := 0
	fmt.Sscan(strings.TrimSpace(string(out)), &n)
	return n
}

// TestSandboxEgress: with egress, an execution reaches the world the host
// reaches, and never the host: not its loopback, its addresses, the
// networks it is on, or private ranges. Its resolver is slirp4netns'.
func TestSandboxEgress(t *testing.T) {
	rt := runtimeForTest(t)
	for _, tool := range []string{"ip", "iptables", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("egress needs %s (CI installs it)", tool)
		}
	}
	// The owner's service, on every address of the host.
	port, stop, err := testhost.OwnerService("0.0.0.0:0", "owner-data")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	targets := append([]string{"127.0.0.1", "10.0.2.2"}, testhost.IPv4s()...)
	var script strings.Builder
	for _, ip := range targets {
		fmt.Fprintf(&script, "timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%d && echo GET / >&3 && cat <&3' 2>/dev/null && echo reached-%s; ", ip, port, ip)
	}
	script.WriteString("cat /etc/resolv.conf; ip route 2>/dev/null || true; echo end")
	// This test's own sandboxes: another test run on the host has its own
	// namespaces meanwhile.
	fenced, worldID := fmt.Sprintf("t%d", time.Now().UnixNano()), fmt.Sprintf("t%d-world", time.Now().UnixNano())
	out, err, sb := run(t, rt, Spec{Network: NetworkEgress, ID: fenced}, "bash -c \""+strings.ReplaceAll(script.String(), `"`, `\"`)+"\"")
	if err != nil || !strings.Contains(out, "end") || strings.Contains(out, "owner-data") || strings.Contains(out, "reached-") {
		t.Errorf("egress reached the host (tried %v): %v\n%s", targets, err, out)
	}
	if !strings.Contains(out, "nameserver "+slirpDNS) {
		t.Errorf("the sandbox's resolver: %q", out)
	}
	// The world, where the host itself reaches it (the Debian mirror is
	// what this project's machines reach).
	if c, err := net.DialTimeout("tcp", "deb.debian.org:80", 5*time.Second); err == nil {
		c.Close()
		out, err, world := run(t, rt, Spec{Network: NetworkEgress, ID: worldID}, "timeout 10 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80' && echo reached-world")
		if err != nil || !strings.Contains(out, "reached-world") {
			t.Errorf("egress does not reach what the host reaches: %v %q", err, out)
		}
		_ = world.Close()
	} else {
		t.Logf("the host reaches no public address (%v): egress to the world is not checked", err)
	}
	if out, _, _ := run(t, rt, Spec{}, "timeout 5 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80' && echo reached-world; echo end"); strings.Contains(out, "reached-world") {
		t.Errorf("network none reached the world: %q", out)
	}
	_ = sb.Close()
	for _, id := range []string{fenced, worldID} {
		if _, err := os.Stat(filepath.Join("/run/netns", "nodus-"+id)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("network namespace nodus-%s outlived its sandbox (%v)", id, err)
		}
	}
}

// TestSandboxImages: an execution that names an image of the host's images
// directory (an OCI layout, or one as an archive) runs on its root instead
// of the host's system; an unknown one is refused as such.
func TestSandboxImages(t *testing.T) {
	rt := runtimeForTest(t)
	rt.ImagesDir = t.TempDir()
	layout := filepath.Join(rt.ImagesDir, "tiny")
	if err := testhost.TinyImage(layout, "v1", t.TempDir()); errors.Is(err, testhost.ErrNoImageTools) {
		t.Skip("images need umoci and a static busybox (CI installs umoci and busybox-static)")
	} else if err != nil {
		t.Fatal(err)
	}
	sh := func(script string) {
		t.Helper()
		if out, err := exec.Command("sh", "-ec", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	out, err, _ := run(t, rt, Spec{Image: "tiny:v1"}, "cat /etc/os-release; ls /usr 2>&1; echo hi > /work/f && cat /work/f")
	if !strings.Contains(out, "ID=nodus-tiny") || strings.Contains(out, "debian") || !strings.Contains(out, "hi") {
		t.Errorf("an execution in image tiny:v1: %v %q", err, out)
	}
	// An image's own host name and hosts, those of the machine it was
	// built on, are not the sandbox's.
	named := filepath.Join(rt.ImagesDir, "named")
	if err := testhost.TinyImageWith(named, "v1", t.TempDir(), "echo builder-host > etc/hostname; printf '127.0.0.1 localhost builder-host\n' > etc/hosts"); err != nil {
		t.Fatal(err)
	}
	if out, err, _ := run(t, rt, Spec{Image: "named:v1"}, "cat /etc/hostname /etc/hosts"); err != nil || strings.Contains(out, "builder-host") || !strings.HasPrefix(out, Hostname+"\n") {
		t.Errorf("an image's /etc/hostname and /etc/hosts: %v %q", err, out)
	}
	// The same image as an archive, under another name.
	sh(fmt.Sprintf(`cd %s && tar -cf %s/packed.tar .`, layout, rt.ImagesDir))
	if out, _, _ := run(t, rt, Spec{Image: "packed:v1"}, "cat /etc/os-release"); !strings.Contains(out, "ID=nodus-tiny") {
		t.Errorf("an execution in the archived image: %q", out)
	}
	for _, ref := range []string{"absent", "tiny:v2", "Bad/Name"} {
		_, err := rt.Start(Spec{ID: "t-missing", Image: ref, Args: []string{"sh"}, UID: nobody, GID: nobody,
			HostWorkDir: workDir(t)}, io.Discard)
		if err == nil {
			t.Errorf("image %q was accepted", ref)
		} else if ref != "Bad/Name" && !errors.Is(err, ErrImageNotFound) {
			t.Errorf("image %q: %v, want ErrImageNotFound", ref, err)
		}
	}
}

// TestAnImagesSymlinksLeadNoWriteOutOfIt: the agent makes the sandbox's
// mount points in an image's unpacked root as root: an image whose /tmp
// was a symlink to a host directory had that directory made 1777 (with
// /etc, any user could then write /etc/ld.so.preload), and one whose
// /etc/resolv.conf was a symlink had the file it names made on the host.
func TestAnImagesSymlinksLeadNoWriteOutOfIt(t *testing.T) {
	rt := runtimeForTest(t)
	rt.ImagesDir = t.TempDir()
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	made := filepath.Join(host, "made")
	setup := fmt.Sprintf("rm -rf tmp etc/resolv.conf && ln -s %s tmp && ln -s %s etc/resolv.conf", host, made)
	if err := testhost.TinyImageWith(filepath.Join(rt.ImagesDir, "links"), "v1", t.TempDir(), setup); errors.Is(err, testhost.ErrNoImageTools) {
		t.Skip("images need umoci and a static busybox (CI installs umoci and busybox-static)")
	} else if err != nil {
		t.Fatal(err)
	}
	out, err, _ := run(t, rt, Spec{Image: "links:v1"}, "cat /etc/os-release; echo hi > /tmp/f && cat /tmp/f")
	if info, statErr := os.Stat(host); statErr != nil || info.Mode().Perm() != 0o755 || info.Mode()&os.ModeSticky != 0 {
		t.Errorf("the host directory the image's /tmp named: %v %v", statErr, info.Mode())
	}
	if _, statErr := os.Lstat(made); statErr == nil {
		t.Error("the file the image's /etc/resolv.conf named was made on the host")
	}
	if !strings.Contains(out, "ID=nodus-tiny") || !strings.Contains(out, "hi") {
		t.Errorf("an execution in the image, its links replaced: %v %q", err, out)
	}
}

// TestRemoveAllTakesOnlyItsOwnNamespaces: an agent starting up removed
// every nodus-* network namespace of the machine, also one another agent
// had just made for an execution it was starting, whose runc then failed
// ("namespace path: no such file"; CI's end-to-end agent lost one so to
// the integration tests' agents). It removes those of its own sandboxes.
func TestRemoveAllTakesOnlyItsOwnNamespaces(t *testing.T) {
	rt := runtimeForTest(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces need ip (CI installs iproute2)")
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	others, mine := "nodus-nodus-others-"+suffix, "t-mine-"+suffix
	for _, name := range []string{others, "nodus-" + mine} {
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	}
	// A sandbox of this runtime whose agent stopped before runc ran: its bundle and namespace.
	if err := os.MkdirAll(filepath.Join(rt.StateDir, "bundles", mine), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", others)); err != nil {
		t.Errorf("another runtime's namespace was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", "nodus-"+mine)); !os.IsNotExist(err) {
		t.Errorf("this runtime's left namespace is still there: %v", err)
	}
}

// TestTheSandboxsNameIsShownOnlyOverFilesThereAre: a mount needs its mount
// point, and the root is read-only: a root without /etc/hosts (an image of
// one binary, a host without the file) must not get a mount there, or
// every execution would fail to start. A link in an image is left alone.
func TestTheSandboxsNameIsShownOnlyOverFilesThereAre(t *testing.T) {
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounted := func() []string {
		t.Helper()
		cfg, err := (&Runtime{DevDir: t.TempDir()}).Config(Spec{UID: nobody, Image: "tiny:v1"}, rootfs, "", "", "/bundle")
		if err != nil {
			t.Fatal(err)
		}
		var over []string
		for _, m := range cfg.Mounts {
			if strings.HasPrefix(m.Source, "/bundle/") {
				over = append(over, m.Destination)
			}
		}
		return over
	}
	if got := mounted(); len(got) != 0 {
		t.Errorf("a root without /etc/hostname and /etc/hosts got mounts there: %v", got)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "hostname"), []byte("builder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/hosts", filepath.Join(rootfs, "etc", "hosts")); err != nil {
		t.Fatal(err)
	}
	if got := mounted(); !slices.Equal(got, []string{"/etc/hostname"}) {
		t.Errorf("a root with a hostname file and a hosts link: mounts over %v", got)
	}
}

// TestALinkedHostFileIsBoundWhereItLeads: a host's /etc/hosts may be a
// link into its system directories (NixOS), which the mount follows to
// the same file inside the sandbox; one leading elsewhere (where the
// sandbox has no such file) or to nothing is left alone.
func TestALinkedHostFileIsBoundWhereItLeads(t *testing.T) {
	system, elsewhere := t.TempDir(), t.TempDir()
	for _, dir := range []string{system, elsewhere} {
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 node-7\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	etc := t.TempDir()
	for name, target := range map[string]string{"into": filepath.Join(system, "hosts"), "out": filepath.Join(elsewhere, "hosts"), "dangling": filepath.Join(system, "none")} {
		if err := os.Symlink(target, filepath.Join(etc, name)); err != nil {
			t.Fatal(err)
		}
	}
	within := []string{system}
	for name, want := range map[string]bool{"into": true, "out": false, "dangling": false, "missing": false} {
		if got := bindable(filepath.Join(etc, name), within); got != want {
			t.Errorf("a link %s: bindable %v, want %v", name, got, want)
		}
	}
	if !bindable(filepath.Join(system, "hosts"), nil) {
		t.Error("a regular file is not bindable")
	}
}

// TestTheUserModeStackRunsUnderSeccomp: slirp4netns runs as root and
// parses every packet a borrower sends; it must run under its seccomp
// filter.
func TestTheUserModeStackRunsUnderSeccomp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a network namespace (CI is root)")
	}
	for _, tool := range []string{"ip", "iptables", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("egress needs %s (CI installs it)", tool)
		}
	}
	e, err := startEgress("seccomp-test")
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.slirp.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		t.Errorf("slirp4netns runs without a seccomp filter:\n%s", status)
	}
}

// TestAPreparedSandboxNotRunLeavesNothing: a stop that comes while an
// execution's sandbox is prepared (an image unpacked, its network made)
// closes it without running it; nothing of it stays.
func TestAPreparedSandboxNotRunLeavesNothing(t *testing.T) {
	rt := runtimeForTest(t)
	for _, tool := range []string{"ip", "iptables", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("egress needs %s (CI installs it)", tool)
		}
	}
	id := fmt.Sprintf("t%d", time.Now().UnixNano())
	sb, err := rt.Prepare(Spec{ID: id, Args: []string{"/bin/true"}, UID: nobody, GID: nobody, HostWorkDir: workDir(t), Network: NetworkEgress})
	if err != nil {
		t.Fatal(err)
	}
	netns := filepath.Join("/run/netns", "nodus-"+id)
	for _, path := range []string{sb.bundle, netns} {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("prepared, %s: %v", path, err)
		}
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{sb.bundle, netns} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("closed without running, %s is left: %v", path, err)
		}
	}
}
