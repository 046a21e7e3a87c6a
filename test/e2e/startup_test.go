package e2e

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// A server whose port another process holds fails its start-up with
// ErrPortTaken, the error StartServer tries another port on;
// the same data directory then starts on a free port.
func TestAServerOnATakenPortIsToldApartAndStartsOnAnother(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	dataDir := filepath.Join(t.TempDir(), "server")
	out := &syncBuffer{}
	_, err = testfleet.StartServerOn(port, serverBinary, dataDir, out)
	if !errors.Is(err, testfleet.ErrPortTaken) {
		t.Fatalf("start-up on a taken port: %v, want ErrPortTaken\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "--secure-port") {
		t.Errorf("the server's refusal does not name the flag to change:\n%s", out.String())
	}
	s := startServerWith(t, dataDir)
	if strings.HasSuffix(s.Config.Host, ":"+itoa(port)) {
		t.Fatalf("the server started on the taken port %d: %s", port, s.Config.Host)
	}
}
