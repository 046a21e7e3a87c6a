// Package freeport picks loopback TCP ports for listeners that are bound
// later: by another process, or by the same one after a restart.
//
// A port the kernel gives for ":0" comes from its ephemeral range, the range
// it also draws the local end of every outgoing connection from. Between
// the pick and the bind, or across a restart, such a connection can hold the
// port, and the listener then fails with "address already in use". The
// ports picked here lie below that range, where the kernel gives out a port
// only to a listener that names it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const (
	// lowest is the first port picked: well above the ports services are
	// commonly configured on.
	lowest = 10000
	// ephemeralRangeFile holds Linux's ephemeral range, "32768\t60999" by
	// default.
	ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	// ianaEphemeralStart is where the ephemeral range starts on systems
	// without that file (the BSDs and macOS follow IANA).
	ianaEphemeralStart = 49152
	// tries is how many random ports are tried before the kernel is asked.
	tries = 64
)

// Pick returns a loopback TCP port that was free a moment ago, below the
// ephemeral range.
func Pick() (int, error) {
	ports, err := PickN(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// PickN returns n distinct loopback TCP ports that were free a moment ago;
// each is held until all are picked.
func PickN(n int) ([]int, error) {
	end := ephemeralStart(ephemeralRangeFile)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := listenBelow(end)
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenBelow listens on a random free port in [lowest, end), or, when that
// range is too small or full, on one the kernel picks.
func listenBelow(end int) (net.Listener, error) {
	if end-lowest >= 1024 {
		for range tries {
			port := lowest + rand.IntN(end-lowest)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a free loopback port: %w", err)
	}
	return l, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range as path
// gives it, or IANA's when path cannot be read.
func ephemeralStart(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return ianaEphemeralStart
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return ianaEphemeralStart
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start < 1 || start > 65535 {
		return ianaEphemeralStart
	}
	return start
}
