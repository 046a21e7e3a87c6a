// Package testhost is what the sandbox's tests and the end-to-end tests
// need of a real host to attack a sandbox with: a service of the owner's on
// the host, the host's addresses, and a tiny OCI image. It depends on
// nothing of Nodus, so that any package's tests may use it.
package testhost

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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
		echo ID=nodus-tiny > %[3]s/rootfs/etc/os-release && umoci repack --image %[2]s %[3]s >/dev/null`, layout, image, bundle, busybox)
	if out, err := exec.Command("sh", "-ec", script).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v: %s", image, err, out)
	}
	return nil
}
