package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The ports picked lie below the ephemeral range, where no outgoing
// connection takes them, and each can be listened on.
func TestPickedPortsAreBelowTheEphemeralRangeAndFree(t *testing.T) {
	end := ephemeralStart(ephemeralRangeFile)
	if end-lowest < 1024 {
		t.Skipf("the ephemeral range starts at %d: no room below it, ports come from the kernel", end)
	}
	ports, err := PickN(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range ports {
		if port < lowest || port >= end {
			t.Errorf("port %d is outside [%d, %d)", port, lowest, end)
		}
		if seen[port] {
			t.Errorf("port %d picked twice in one call", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("port %d was picked but cannot be listened on: %v", port, err)
			continue
		}
		l.Close()
	}
}

func TestEphemeralStartReadsTheKernelsRange(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		want    int
	}{
		{"32768\t60999\n", 32768},
		{"40000 50000", 40000},
		{"", ianaEphemeralStart},
		{"garbage", ianaEphemeralStart},
		{"0\t100", ianaEphemeralStart},
	} {
		path := filepath.Join(dir, "range")
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := ephemeralStart(path); got != c.want {
			t.Errorf("ephemeralStart(%q) = %d, want %d", c.content, got, c.want)
		}
	}
	if got := ephemeralStart(filepath.Join(dir, "absent")); got != ianaEphemeralStart {
		t.Errorf("ephemeralStart of a missing file = %d, want %d", got, ianaEphemeralStart)
	}
}

// A range too small to pick from falls back to the kernel's choice.
func TestATooSmallRangeFallsBackToTheKernel(t *testing.T) {
	l, err := listenBelow(lowest + 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if port := l.Addr().(*net.TCPAddr).Port; port >= lowest && port < lowest+10 {
		t.Errorf("port %d was drawn from a range of 10", port)
	}
}
