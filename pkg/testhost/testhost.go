// Package testhost is what the sandbox's tests and the end-to-end tests
// need of a real host to attack a sandbox with: a service of the owner's on
// the host, the host's addresses, a tiny OCI image and stand-in GPUs. It
// depends on nothing of Nodus, so that any package's tests may use it.
package testhost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoImageTools: umoci or a static busybox is missing (CI installs both).
var ErrNoImageTools = errors.New("umoci and busybox are needed to build a test image")

// OwnerService serves body over HTTP on address (host:0 picks a port), as
// an owner's service a borrower must never reach. It returns the port and
// a function that stops it.
func OwnerService(address, body string) (int, func(), error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return 0, nil, err
	}
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	}()
	return l.Addr().(*net.TCPAddr).Port, func() { _ = l.Close() }, nil
}

// IPv4s are the host's own IPv4 addresses, loopback excluded.
func IPv4s() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// TinyImage makes an OCI layout at layout, tagged tag: a static busybox
// as sh, cat, ls and echo, and an /etc/os-release saying ID=nodus-tiny. It
// builds in work.
func TinyImage(layout, tag, work string) error {
	return TinyImageWith(layout, tag, work, "")
}

// TinyImageWith is TinyImage with setup, a shell script, run in the image's
// root filesystem (its working directory) before it is packed.
func TinyImageWith(layout, tag, work, setup string) error {
	busybox, err1 := exec.LookPath("busybox")
	_, err2 := exec.LookPath("umoci")
	if err1 != nil || err2 != nil {
		return ErrNoImageTools
	}
	image := layout + ":" + tag
	bundle := filepath.Join(work, "bundle")
	script := fmt.Sprintf(`umoci init --layout %[1]s && umoci new --image %[2]s && umoci unpack --image %[2]s %[3]s >/dev/null
		mkdir -p %[3]s/rootfs/bin %[3]s/rootfs/etc && cp %[4]s %[3]s/rootfs/bin/busybox
		for c in sh cat ls echo; do ln -s busybox %[3]s/rootfs/bin/$c; done
		echo ID=nodus-tiny > %[3]s/rootfs/etc/os-release
		(cd %[3]s/rootfs
		%[5]s
		)
		umoci repack --image %[2]s %[3]s >/dev/null`, layout, image, bundle, busybox, setup)
	if out, err := exec.Command("sh", "-ec", script).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v: %s", image, err, out)
	}
	return nil
}

// NVIDIAMajor is the character device major of /dev/nvidiaN and nvidiactl.
const NVIDIAMajor = 195

// ErrHasNVIDIA: the host has NVIDIA device nodes of its own, which a test
// must neither shadow nor remove.
var ErrHasNVIDIA = errors.New("this host has NVIDIA device nodes")

// MakeNVIDIANode makes a character device node at path with NVIDIA's major
// number and minor: without a driver, opening it fails with ENXIO, unless
// a device cgroup refuses it first (EPERM).
func MakeNVIDIANode(path string, minor uint32) error {
	return unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(NVIDIAMajor, minor)))
}

// FakeGPUs gives a host without NVIDIA GPUs n of them as far as a host
// agent can tell: /dev/nvidia0…n-1 and /dev/nvidiactl, and an nvidia-smi in
// bin that reports n H100s. It returns a function removing the nodes.
// Only the device cgroup and the agent's inventory meet them; there is no
// driver behind them.
func FakeGPUs(bin string, n int) (func(), error) {
	if found, _ := filepath.Glob("/dev/nvidia*"); len(found) > 0 {
		return nil, ErrHasNVIDIA
	}
	var made []string
	remove := func() {
		for _, p := range made {
			_ = os.Remove(p)
		}
	}
	nodes := map[string]uint32{"/dev/nvidiactl": 255}
	for i := range n {
		nodes[fmt.Sprintf("/dev/nvidia%d", i)] = uint32(i)
	}
	for path, minor := range nodes {
		if err := MakeNVIDIANode(path, minor); err != nil {
			remove()
			return nil, err
		}
		made = append(made, path)
	}
	var lines strings.Builder
	for range n {
		lines.WriteString("NVIDIA H100 80GB HBM3, 81559, 550.54.15\n")
	}
	script := "#!/bin/sh\n# A test's stand-in: the GPUs of FakeGPUs.\ncat <<'EOF'\n" + lines.String() + "EOF\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		remove()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		remove()
		return nil, err
	}
	return remove, nil
}

// SystemAccount adds a system account without a home, named prefix and a
// few random letters, for processes a test runs as another user; remove
// takes it away again. It needs root and useradd.
func SystemAccount(prefix string) (name string, uid, gid int, remove func(), err error) {
	return account(prefix, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin")
}

// LoginAccount adds an account with a home, as people's accounts are (a uid
// from UID_MIN up), such as a host's login user; remove takes it away again
// with its home. It needs root and useradd.
func LoginAccount(prefix string) (name string, uid, gid int, remove func(), err error) {
	return account(prefix, "--create-home", "--shell", "/bin/sh")
}

// BorrowerSlots adds the accounts of a borrower user with slots
// execution slots, as nodusd's --borrower-user and --borrower-slots name
// them: "<user>-0" … "<user>-<slots-1>", user being prefix and a few
// random letters. remove ends their processes and takes them away again.
// It needs root and useradd.
func BorrowerSlots(prefix string, slots int) (borrower string, remove func(), err error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", nil, err
	}
	borrower = fmt.Sprintf("%s%x", prefix, suffix)
	var added []string
	remove = func() {
		for _, slot := range added {
			_ = exec.Command("pkill", "-KILL", "-u", slot).Run()
			_ = exec.Command("userdel", slot).Run()
		}
	}
	for i := range slots {
		slot := fmt.Sprintf("%s-%d", borrower, i)
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", slot).CombinedOutput(); err != nil {
			remove()
			return "", nil, fmt.Errorf("useradd %s: %v: %s", slot, err, out)
		}
		added = append(added, slot)
	}
	return borrower, remove, nil
}

func account(prefix string, flags ...string) (name string, uid, gid int, remove func(), err error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", 0, 0, nil, err
	}
	name = fmt.Sprintf("%s-%x", prefix, suffix)
	if out, err := exec.Command("useradd", append(flags, name)...).CombinedOutput(); err != nil {
		return "", 0, 0, nil, fmt.Errorf("useradd %s: %v: %s", name, err, out)
	}
	remove = func() { _ = exec.Command("userdel", "--remove", name).Run() }
	u, err := user.Lookup(name)
	if err == nil {
		uid, err = strconv.Atoi(u.Uid)
	}
	if err == nil {
		gid, err = strconv.Atoi(u.Gid)
	}
	if err != nil {
		remove()
		return "", 0, 0, nil, err
	}
	return name, uid, gid, remove, nil
}
