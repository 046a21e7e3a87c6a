// Package sandbox runs one borrower execution in an OCI runtime (runc), as
// Kubernetes runs a container: its own mount, PID, IPC, UTS and network
// namespaces; a root made of the host's system directories bound read-only,
// with nothing of /home, /root, the agent's state or sshd's keys; the
// execution's work directory as its only writable place besides a private
// /tmp; no capabilities, no new privileges and the default seccomp profile
// of Docker and containerd; and a cgroup of its own with memory, CPU and
// pids limits whose device rules let it open only the GPUs it was given.
//
// Every process of the execution is in that cgroup and PID namespace, so
// nothing it starts (setsid, a double fork) outlives it: when its first
// process ends, the kernel ends the rest, and a stop signals the cgroup.
package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
)

// NVIDIA's character device major number: /dev/nvidiaN is 195:N,
// nvidiactl 195:255 and nvidia-modeset 195:254. nvidia-uvm's major is
// dynamic and read from the node.
const nvidiaMajor = 195

// WorkDir is where the execution's work directory appears in the sandbox.
const WorkDir = "/work"

// Network policies.
const (
	// NetworkNone: a network namespace with only its own loopback.
	NetworkNone = "none"
)

// Spec is one execution to run.
type Spec struct {
	// ID names the sandbox (the runtime's container id).
	ID string
	// Args is the command; Args[0] is resolved in the sandbox's PATH.
	Args []string
	// Env is the whole environment.
	Env []string
	// UID and GID are the borrower account's.
	UID, GID uint32
	// HostWorkDir is the host directory bound at WorkDir, writable.
	HostWorkDir string
	// GPUs are the indices of the GPUs the execution may open.
	GPUs []int32
	// MemoryBytes, MilliCPUs and Pids bound the execution; 0 is unbounded.
	MemoryBytes int64
	MilliCPUs   int64
	Pids        int64
	// Network is the network policy: NetworkNone (the default) or NetworkEgress.
	Network string
	// Image, when set, is an OCI image of the host's images directory
	// (NAME[:TAG]) whose root replaces the host's read-only system.
	Image string
}

// Runtime is the OCI runtime on this host.
type Runtime struct {
	// Binary is runc.
	Binary string
	// StateDir holds runc's state (--root) and the bundles; root only.
	StateDir string
	// DevDir is where GPU device nodes are looked up; "/dev" but in tests.
	DevDir string
	// DriverDir is the NVIDIA driver's list of GPUs, one directory per PCI
	// bus id with an "information" file; "/proc/driver/nvidia/gpus" but in
	// tests. It maps a GPU's index to its device node.
	DriverDir string
	// CgroupParent is the cgroup under which every sandbox gets its own.
	CgroupParent string
	// ImagesDir holds the OCI images executions may name: layout
	// directories NAME/ or archives NAME.tar.
	ImagesDir string

	imagesMu sync.Mutex
}

// Find returns the runc runtime of this host, or an error saying what is missing.
func Find(stateDir string) (*Runtime, error) {
	binary, err := exec.LookPath("runc")
	if err != nil {
		return nil, errors.New("runc is not installed (Debian: apt-get install runc); borrowers' executions need it")
	}
	return &Runtime{Binary: binary, StateDir: stateDir, DevDir: "/dev", CgroupParent: "/nodus-executions"}, nil
}

// systemDirs are bound read-only from the host; anything else of the host
// is absent from the sandbox.
var systemDirs = []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// maskedPaths hide what stays secret even read-only: sshd's host keys and
// the agent's configuration, and the kernel's usual sensitive files.
var maskedPaths = []string{
	"/etc/ssh", "/etc/nodusd",
	// What names or tells the machine apart: the node is not the
	// borrower's to know (its kernel command line may carry the host name
	// of a network boot).
	"/etc/machine-id", "/etc/machine-info", "/etc/mailname", "/proc/cmdline",
	"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
}

var readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// Hostname is every sandbox's host name: the node's name is not the
// borrower's to learn (it sees its host's alias).
const Hostname = "nodus-execution"

// hostFiles are the files shown over /etc/hostname and /etc/hosts, the
// host's, which name the node (nodusd enrolls a host under its host name
// unless told otherwise), or an image's, which name the machine it was
// built on and not the sandbox's own name.
var hostFiles = map[string]string{
	"hostname": Hostname + "\n",
	"hosts":    "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
}

// bindable says whether a file can be bound over path in the sandbox: a
// regular file, or a link whose target is one below a directory of within
// (bound into the sandbox, where the mount follows the link to it).
func bindable(path string, within []string) bool {
	info, err := os.Lstat(path)
	switch {
	case err != nil:
		return false
	case info.Mode().IsRegular():
		return true
	case info.Mode()&os.ModeSymlink == 0:
		return false
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	if t, err := os.Stat(target); err != nil || !t.Mode().IsRegular() {
		return false
	}
	for _, dir := range within {
		if strings.HasPrefix(target, dir+"/") {
			return true
		}
	}
	return false
}

// Config is the OCI runtime configuration of s, with its root at rootfs
// (the bundle's empty one, or s.Image's unpacked root); with egress, netns
// is the prepared network namespace and resolvConf the resolver
// configuration to show; identityDir holds hostFiles, shown over those of
// the root's /etc (the host's or the image's) that are files: a mount needs
// its mount point, which a read-only root cannot be given.
func (rt *Runtime) Config(s Spec, rootfs, netns, resolvConf, identityDir string) (*specs.Spec, error) {
	switch s.Network {
	case "", NetworkNone:
	case NetworkEgress:
		if netns == "" || resolvConf == "" {
			return nil, errors.New("network egress needs its prepared namespace")
		}
	default:
		return nil, fmt.Errorf("network policy %q is not supported", s.Network)
	}
	if s.UID == 0 {
		return nil, errors.New("a sandbox never runs as root")
	}
	cfg := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: s.UID, GID: s.GID}, Args: s.Args, Env: s.Env, Cwd: WorkDir,
			NoNewPrivileges: true,
			// No capabilities at all: an unprivileged account's process.
			Capabilities: &specs.LinuxCapabilities{},
			// No core dump it could raise: the host's handler
			// (systemd-coredump) would keep its memory outside the sandbox.
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_CORE", Hard: 0, Soft: 0}},
		},
		Hostname: Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
			// The work directory is the one writable place. It is not
			// nodev: no one in the sandbox can make a device node, and the
			// device cgroup, not the mount, decides what may be opened.
			{Destination: WorkDir, Type: "bind", Source: s.HostWorkDir, Options: []string{"rbind", "rw", "nosuid"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: netns}},
			CgroupsPath:   filepath.Join(rt.cgroupParent(), s.ID),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
			Resources:     &specs.LinuxResources{},
		},
	}
	for _, dir := range systemDirs {
		if s.Image != "" {
			break // the image is the system
		}
		info, err := os.Lstat(dir)
		switch {
		case err != nil:
			continue
		case info.Mode()&os.ModeSymlink != 0:
			// merged /usr: /bin → usr/bin is made in the rootfs as the same link.
			continue
		case info.IsDir():
			cfg.Mounts = append(cfg.Mounts, specs.Mount{Destination: dir, Type: "bind", Source: dir,
				Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	}
	if identityDir != "" {
		// After /etc, which they cover. The host's may be links into its
		// system directories (NixOS: /etc/hosts → /etc/static/hosts), which
		// the mount follows inside the sandbox's root to the same file; an
		// image's links are left alone (nothing of the host is in it).
		etc, within := "/etc", systemDirs
		if s.Image != "" {
			etc, within = filepath.Join(rootfs, "etc"), nil
		}
		for _, name := range slices.Sorted(maps.Keys(hostFiles)) {
			if !bindable(filepath.Join(etc, name), within) {
				continue // none to hide: a mount point cannot be made in the read-only root
			}
			cfg.Mounts = append(cfg.Mounts, specs.Mount{Destination: "/etc/" + name, Type: "bind", Source: filepath.Join(identityDir, name),
				Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	if resolvConf != "" {
		// After /etc, which it covers.
		cfg.Mounts = append(cfg.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: resolvConf,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	res := cfg.Linux.Resources
	if s.MemoryBytes > 0 {
		limit := s.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &limit}
	}
	if s.MilliCPUs > 0 {
		period := uint64(100000)
		quota := s.MilliCPUs * int64(period) / 1000
		res.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if s.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: s.Pids}
	}
	devices, rules, err := rt.gpuDevices(s.GPUs)
	if err != nil {
		return nil, err
	}
	cfg.Linux.Devices = devices
	// Deny every device, then allow runc's defaults (null, zero, full,
	// random, urandom, tty, console, pts, which runc adds itself) and the GPUs.
	res.Devices = append([]specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}, rules...)
	profile, err := seccomp.GetDefaultProfile(cfg)
	if err != nil {
		return nil, fmt.Errorf("the default seccomp profile: %w", err)
	}
	cfg.Linux.Seccomp = profile
	return cfg, nil
}

func (rt *Runtime) cgroupParent() string {
	if rt.CgroupParent != "" {
		return rt.CgroupParent
	}
	return "/nodus-executions"
}

// gpuDevices are the device nodes of gpus and NVIDIA's control nodes, as
// found under DevDir, with the device cgroup rules that allow exactly them.
func (rt *Runtime) gpuDevices(gpus []int32) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	var names []string
	if len(gpus) > 0 {
		dir := rt.DriverDir
		if dir == "" {
			dir = nvidiagpus.DriverDir
		}
		listed, err := nvidiagpus.List(dir)
		if err != nil && !errors.Is(err, nvidiagpus.ErrNoDriver) {
			return nil, nil, err
		}
		for _, g := range gpus {
			minor, err := gpuMinor(listed, g)
			if err != nil {
				return nil, nil, err
			}
			names = append(names, "nvidia"+strconv.Itoa(minor))
		}
	}
	if len(gpus) > 0 {
		names = append(names, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
	}
	var devices []specs.LinuxDevice
	var rules []specs.LinuxDeviceCgroup
	for _, name := range names {
		path := filepath.Join(rt.devDir(), name)
		// The GPUs and nvidiactl must be there; the other control nodes
		// exist only with some drivers and settings.
		required := isGPUNode(name) || name == "nvidiactl"
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			switch {
			case errors.Is(err, unix.ENOENT) && name == "nvidia-uvm":
				// CUDA fails without it (cuInit 999); nvidia-smi does not.
				klog.InfoS("the host has no /dev/nvidia-uvm: CUDA in executions fails until the driver loads it (nvidia-modprobe -u -c=0)", "dir", rt.devDir())
				continue
			case errors.Is(err, unix.ENOENT) && !required:
				continue
			case errors.Is(err, unix.ENOENT):
				return nil, nil, fmt.Errorf("GPU device %s does not exist on this host", path)
			}
			return nil, nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return nil, nil, fmt.Errorf("%s is not a character device", path)
		}
		major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		if isGPUNode(name) && major != nvidiaMajor {
			return nil, nil, fmt.Errorf("%s has major %d, not NVIDIA's %d", path, major, nvidiaMajor)
		}
		mode := os.FileMode(0o666)
		devices = append(devices, specs.LinuxDevice{Path: "/dev/" + name, Type: "c", Major: major, Minor: minor, FileMode: &mode})
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rw"})
	}
	return devices, rules, nil
}

// isGPUNode says whether name is /dev/nvidiaN.
func isGPUNode(name string) bool {
	n, ok := strings.CutPrefix(name, "nvidia")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}

// gpuMinor is the device minor number of the GPU of index (its
// /dev/nvidiaN), by the driver's own list: the driver numbers its nodes in
// the order it probed the GPUs, not necessarily the PCI bus order the
// index counts in. Without the list (nil: no driver loaded) the index is
// taken for the minor, and the device node's check that follows decides.
func gpuMinor(listed []nvidiagpus.GPU, index int32) (int, error) {
	switch {
	case listed == nil:
		return int(index), nil
	case index < 0 || int(index) >= len(listed):
		return 0, fmt.Errorf("GPU %d does not exist on this host (the driver lists %d)", index, len(listed))
	case listed[index].Err != nil:
		return 0, listed[index].Err
	}
	return listed[index].Minor, nil
}

func (rt *Runtime) devDir() string {
	if rt.DevDir != "" {
		return rt.DevDir
	}
	return "/dev"
}

// Sandbox is one started execution.
type Sandbox struct {
	rt     *Runtime
	id     string
	bundle string
	cmd    *exec.Cmd
	cgroup string
	net    *egress

	closeOnce sync.Once
}

// Start prepares s's sandbox and runs it; its output goes to out. It takes
// no context on purpose: a sandbox ends by Signal and Close, never because
// a caller's context did (its processes would be killed without a report).
func (rt *Runtime) Start(s Spec, out io.Writer) (*Sandbox, error) {
	sb, err := rt.Prepare(s)
	if err != nil {
		return nil, err
	}
	if err := sb.Run(out); err != nil {
		_ = sb.Close()
		return nil, err
	}
	return sb, nil
}

// Prepare writes s's bundle: its root (an image's, unpacked the first
// time, which can take minutes), its network and its config. Run starts
// it; Close removes one that is not to run.
func (rt *Runtime) Prepare(s Spec) (*Sandbox, error) {
	bundle := filepath.Join(rt.StateDir, "bundles", s.ID)
	rootfs := filepath.Join(bundle, "rootfs")
	// The bundle is root's; its rootfs becomes the sandbox's "/", which
	// the borrower account must be able to pass.
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(rootfs, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	sb := &Sandbox{rt: rt, id: s.ID, bundle: bundle, cgroup: filepath.Join(rt.cgroupParent(), s.ID)}
	fail := func(err error) (*Sandbox, error) {
		if sb.net != nil {
			sb.net.close()
		}
		_ = os.RemoveAll(bundle)
		return nil, err
	}
	if s.Image != "" {
		root, err := rt.imageRoot(s.Image)
		if err != nil {
			return fail(err)
		}
		rootfs = root
	} else if err := makeRootfs(rootfs); err != nil {
		return fail(err)
	}
	netns, resolv := "", ""
	if s.Network == NetworkEgress {
		var err error
		if sb.net, err = startEgress(s.ID); err != nil {
			return fail(err)
		}
		netns, resolv = sb.net.path, filepath.Join(bundle, "resolv.conf")
		if err := os.WriteFile(resolv, []byte(resolvConf), 0o644); err != nil {
			return fail(err)
		}
	}
	for name, content := range hostFiles {
		if err := os.WriteFile(filepath.Join(bundle, name), []byte(content), 0o644); err != nil {
			return fail(err)
		}
	}
	cfg, err := rt.Config(s, rootfs, netns, resolv, bundle)
	if err != nil {
		return fail(err)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return fail(err)
	}
	return sb, nil
}

// Run starts the prepared sandbox; its output goes to out.
func (sb *Sandbox) Run(out io.Writer) error {
	// runc run stays in the foreground: it returns the execution's exit
	// status, and the execution's output is runc's.
	cmd := exec.Command(sb.rt.Binary, "--root", sb.rt.runcRoot(), "run", "--keep", "--bundle", sb.bundle, sb.id)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting runc: %w", err)
	}
	sb.cmd = cmd
	return nil
}

func (rt *Runtime) runcRoot() string { return filepath.Join(rt.StateDir, "runc") }

// RemoveAll removes every sandbox this runtime left (an agent that stopped
// while executions ran): their processes are killed.
func (rt *Runtime) RemoveAll() error {
	out, err := exec.Command(rt.Binary, "--root", rt.runcRoot(), "list", "-q").Output()
	if err != nil {
		if _, statErr := os.Stat(rt.runcRoot()); os.IsNotExist(statErr) {
			return os.RemoveAll(filepath.Join(rt.StateDir, "bundles"))
		}
		return fmt.Errorf("runc list: %w", err)
	}
	var errs []error
	ids := strings.Fields(string(out))
	for _, id := range ids {
		if out, err := exec.Command(rt.Binary, "--root", rt.runcRoot(), "delete", "--force", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, bytes.TrimSpace(out)))
		}
	}
	// A sandbox whose agent stopped before runc ran has its bundle only.
	if entries, err := os.ReadDir(filepath.Join(rt.StateDir, "bundles")); err == nil {
		for _, e := range entries {
			ids = append(ids, e.Name())
		}
	}
	errs = append(errs, os.RemoveAll(filepath.Join(rt.StateDir, "bundles")))
	// Their network namespaces (slirp4netns ended with the agent that
	// started it); only theirs: another runtime's on this machine (another
	// agent's, a test's) may be one it is starting an execution in.
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join("/run/netns", "nodus-"+id)); err == nil {
			_ = exec.Command("ip", "netns", "delete", "nodus-"+id).Run()
		}
	}
	return errors.Join(errs...)
}

// makeRootfs makes the empty root the host's directories are bound into,
// with merged-/usr links where the host has them.
func makeRootfs(rootfs string) error {
	for _, dir := range append([]string{"proc", "dev", "sys", "tmp", strings.TrimPrefix(WorkDir, "/")}, trimAll(systemDirs)...) {
		host := "/" + dir
		if target, err := os.Readlink(host); err == nil {
			if err := os.Symlink(target, filepath.Join(rootfs, dir)); err != nil && !os.IsExist(err) {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(rootfs, dir), 0o755); err != nil {
			return err
		}
	}
	// runc gives a tmpfs the mode of the directory it covers.
	return os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777|os.ModeSticky)
}

func trimAll(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = strings.TrimPrefix(d, "/")
	}
	return out
}

// Pid is the runc process's pid (not the execution's).
func (sb *Sandbox) Pid() int { return sb.cmd.Process.Pid }

// Wait waits for the execution to end and returns runc's exit: the
// execution's own status.
func (sb *Sandbox) Wait() error { return sb.cmd.Wait() }

// Signal sends sig to every process of the sandbox. A SIGKILL that runc
// fails to send is sent by the agent itself to every process of the
// sandbox's cgroup: a stop (a maximum runtime, a cancel) must not depend on
// runc's state being readable.
func (sb *Sandbox) Signal(sig syscall.Signal) error {
	out, err := exec.Command(sb.rt.Binary, "--root", sb.rt.runcRoot(), "kill", "--all", sb.id, strconv.Itoa(int(sig))).CombinedOutput()
	if err == nil || bytes.Contains(out, []byte("not exist")) || bytes.Contains(out, []byte("not running")) {
		return nil
	}
	err = fmt.Errorf("runc kill: %v: %s", err, bytes.TrimSpace(out))
	if sig != syscall.SIGKILL {
		return err
	}
	if kerr := sb.killCgroup(); kerr != nil {
		return fmt.Errorf("%w; killing its cgroup's processes: %v", err, kerr)
	}
	klog.ErrorS(err, "runc could not kill a sandbox; its cgroup's processes were killed instead", "sandbox", sb.id)
	return nil
}

// killCgroup sends SIGKILL to every process in the sandbox's cgroup. Each
// is signalled through a pidfd opened while it is still seen in the cgroup,
// so that a pid reused meanwhile by a process outside it is never hit. The
// sandbox's init is among them, and its end ends its PID namespace.
func (sb *Sandbox) killCgroup() error {
	pids, dir, err := sb.cgroupProcs()
	if err != nil {
		return err
	}
	var failed []string
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // gone already
		}
		if inCgroup(pid, dir) {
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				failed = append(failed, fmt.Sprintf("%d: %v", pid, err))
			}
		}
		unix.Close(fd)
	}
	if len(failed) > 0 {
		return fmt.Errorf("SIGKILL refused for %s", strings.Join(failed, ", "))
	}
	return nil
}

// cgroupProcs lists the pids in the sandbox's cgroup, from the unified
// hierarchy or the first v1 controller that has it, and the cgroup's path
// as /proc/PID/cgroup names it.
func (sb *Sandbox) cgroupProcs() ([]int, string, error) {
	var firstErr error
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"} {
		data, err := os.ReadFile(filepath.Join(root, sb.cgroup, "cgroup.procs"))
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return pids, sb.cgroup, nil
	}
	return nil, "", fmt.Errorf("the sandbox's cgroup %s: %w", sb.cgroup, firstErr)
}

// inCgroup says whether pid's /proc/PID/cgroup puts it in the cgroup path
// (or below it) in some hierarchy.
func inCgroup(pid int, path string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == path || strings.HasPrefix(parts[2], path+"/")) {
			return true
		}
	}
	return false
}

// OOMKilled says whether the kernel killed a process of the sandbox for its
// memory limit. Call it before Close, which removes the cgroup.
func (sb *Sandbox) OOMKilled() bool {
	for _, path := range []string{
		filepath.Join("/sys/fs/cgroup", sb.cgroup, "memory.events"),             // v2
		filepath.Join("/sys/fs/cgroup/memory", sb.cgroup, "memory.oom_control"), // v1
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
				return true
			}
		}
	}
	return false
}

// Close removes the sandbox, its cgroup and its bundle; what still runs in
// it is killed.
func (sb *Sandbox) Close() error {
	var err error
	sb.closeOnce.Do(func() {
		out, e := exec.Command(sb.rt.Binary, "--root", sb.rt.runcRoot(), "delete", "--force", sb.id).CombinedOutput()
		if e != nil && !bytes.Contains(out, []byte("not exist")) {
			err = fmt.Errorf("runc delete: %v: %s", e, bytes.TrimSpace(out))
		}
		if sb.net != nil {
			sb.net.close()
		}
		if e := os.RemoveAll(sb.bundle); e != nil && err == nil {
			err = e
		}
	})
	return err
}
