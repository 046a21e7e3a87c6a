package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// NetworkEgress: the execution reaches public addresses through a
// user-mode network stack (slirp4netns), which connects from the host's
// own sockets; a firewall in the execution's network namespace, set before
// it starts and out of its reach (it has no capabilities), refuses the
// host's loopback and addresses, the networks the host is on, and every
// private, shared, link-local and multicast range: never the owner's
// services, the datacenter's management networks or cloud metadata.
const NetworkEgress = "egress"

// slirpDNS is the resolver slirp4netns offers inside the namespace.
const slirpDNS = "10.0.2.3"

// refusedNetworks are never reachable by egress, whatever the host's own.
var refusedNetworks = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
}

// egress is one execution's network namespace and its user-mode stack.
type egress struct {
	name, path string
	slirp      *exec.Cmd
	exit       *os.File // closing it (or the agent ending) ends slirp4netns
}

// startEgress makes the namespace for sandbox id, fences it, and starts
// slirp4netns on it.
func startEgress(id string) (*egress, error) {
	for _, tool := range []string{"ip", "iptables", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("network egress needs %s (Debian: apt-get install iproute2 iptables slirp4netns)", tool)
		}
	}
	e := &egress{name: "nodus-" + id, path: filepath.Join("/run/netns", "nodus-"+id)}
	if out, err := exec.Command("ip", "netns", "add", e.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", e.name, err, bytes.TrimSpace(out))
	}
	if err := e.fence(); err != nil {
		e.close()
		return nil, err
	}
	ready, readyW, err := os.Pipe()
	if err != nil {
		e.close()
		return nil, err
	}
	defer ready.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		e.close()
		return nil, err
	}
	e.exit = exitW
	// It runs as root and parses every packet the borrower sends: under a
	// seccomp filter of the calls it needs (--enable-seccomp), so that a
	// flaw of libslirp's a packet reaches cannot call what it does not.
	// (Its --enable-sandbox, a mount namespace of its own without
	// capabilities, left the namespace's /run/netns file unusable: runc
	// could not join it.)
	e.slirp = exec.Command("slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-seccomp",
		"--ready-fd=3", "--exit-fd=4", "--netns-type=path", e.path, "tap0")
	e.slirp.ExtraFiles = []*os.File{readyW, exitR}
	err = e.slirp.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		e.slirp = nil
		e.close()
		return nil, fmt.Errorf("starting slirp4netns: %w", err)
	}
	got := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := ready.Read(b)
		got <- err
	}()
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		err = errors.New("not ready within 10s")
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("slirp4netns for %s: %w", e.name, err)
	}
	return e, nil
}

// fence writes the namespace's firewall: DNS to slirp's resolver and the
// namespace's own loopback pass; the refused networks and every network
// and address of the host are rejected.
func (e *egress) fence() error {
	rules := [][]string{
		{"-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"},
		{"-A", "OUTPUT", "-d", slirpDNS, "-p", "udp", "--dport", "53", "-j", "ACCEPT"},
		{"-A", "OUTPUT", "-d", slirpDNS, "-p", "tcp", "--dport", "53", "-j", "ACCEPT"},
	}
	refused := append([]string{}, refusedNetworks...)
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			refused = append(refused, n.IP.String()+"/32", (&net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String())
		}
	}
	for _, cidr := range refused {
		rules = append(rules, []string{"-A", "OUTPUT", "-d", cidr, "-j", "REJECT"})
	}
	for _, rule := range rules {
		args := append([]string{"netns", "exec", e.name, "iptables"}, rule...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %v in %s: %v: %s", rule, e.name, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// close ends slirp4netns and removes the namespace.
func (e *egress) close() {
	if e.exit != nil {
		e.exit.Close()
	}
	if e.slirp != nil && e.slirp.Process != nil {
		_ = e.slirp.Process.Kill()
		_ = e.slirp.Wait()
	}
	_ = exec.Command("ip", "netns", "delete", e.name).Run()
}

// resolvConf is the resolver configuration an egress sandbox gets.
const resolvConf = "nameserver " + slirpDNS + "\n"
