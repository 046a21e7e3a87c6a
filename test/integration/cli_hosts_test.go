package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestHostsOfEveryProjectFailWhenAProjectCannotBeRead: hosts list -A lists
// each of the caller's projects in turn, and skipped one whose list failed
// for any reason: a server error left its hosts out of an answer that
// exited 0, as if the project had none.
func TestHostsOfEveryProjectFailWhenAProjectCannotBeRead(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "gpu-001", now.Add(-time.Hour), now.Add(time.Hour))
	proxy := unavailableFor(t, s, http.MethodGet, "/namespaces/acme/reservedhosts")
	direct := loggedInTo(t, s.Config.Host, s.Config.CAData, f.member.BearerToken)
	if out, code := direct.run("", "hosts", "list", "-A"); code != 0 || !strings.Contains(out, "acme/gpu-001") {
		t.Fatalf("hosts list -A: %d %s", code, out)
	}
	failing := loggedInTo(t, proxy.Host, proxy.CAData, f.member.BearerToken)
	out, code := failing.run("", "hosts", "list", "-A")
	if code != cli.ExitServer || !strings.Contains(out, "acme") {
		t.Errorf("hosts list -A with acme's list failing: exit %d, want %d naming the project:\n%s", code, cli.ExitServer, out)
	}
}
