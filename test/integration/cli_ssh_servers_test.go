package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestCLISSHAliasIsOneServers: the alias nodus ssh installs,
// NAME.PROJECT.nodus, names no server, and two servers (two providers) may
// each have a host acme/gpu-007. nodus ssh of the second server's used to
// replace the first one's block, pinned key and certificate without a
// word, and `ssh gpu-007.acme.nodus` (and scp, and editors that read
// ssh_config) then reached the second server's host. The second server is
// the same one here, through a proxy, under another URL: it must be told
// apart, refused until the user asks for the alias with --replace.
func TestCLISSHAliasIsOneServers(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(http.ResponseWriter, *http.Request, http.Handler) bool { return false })
	home := ownHome(t)
	first := loggedInTo(t, s.Config.Host, s.Config.CAData, f.member.BearerToken)
	second := loggedInTo(t, proxy.Host, proxy.CAData, f.member.BearerToken)
	dir := filepath.Join(home, ".config", "nodus", "ssh")
	files := func() map[string]string {
		out := map[string]string{}
		for _, name := range []string{"config", "known_hosts", "acme_gpu-007-cert.pub", "acme_gpu-007-cert.pub.json"} {
			data, _ := os.ReadFile(filepath.Join(dir, name))
			out[name] = string(data)
		}
		return out
	}
	if out, code := first.run("", "ssh", "acme/gpu-007", "--config-only"); code != 0 {
		t.Fatalf("nodus ssh of the first server: %d %s", code, out)
	}
	before := files()
	out, code := second.run("", "ssh", "acme/gpu-007", "--config-only")
	if code == 0 || !strings.Contains(out, "--replace") || !strings.Contains(out, s.Config.Host) {
		t.Errorf("nodus ssh of a second server's host under the first's alias: exit %d, want a refusal naming the first server and --replace:\n%s", code, out)
	}
	for name, was := range before {
		if now := files()[name]; now != was {
			t.Errorf("%s changed for a refused alias:\n%s\nbecame\n%s", name, was, now)
		}
	}
	if out, code := second.run("", "ssh", "acme/gpu-007", "--config-only", "--replace"); code != 0 {
		t.Fatalf("nodus ssh --replace: %d %s", code, out)
	}
	if out, code := first.run("", "ssh", "acme/gpu-007", "--config-only"); code == 0 || !strings.Contains(out, proxy.Host) {
		t.Errorf("nodus ssh of the first server once the second took the alias: exit %d, want a refusal naming the second:\n%s", code, out)
	}
}

// TestCLISSHOfAHostWithoutAccessSaysWhy: `nodus ssh` of a host that gives
// no access answered a usage error (exit 2) without a reason, a page or a
// next step; it is the CLI's HostNotConnectable, with the host's state.
func TestCLISSHOfAHostWithoutAccessSaysWhy(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "later")
	f.reserve(t, "later", nodusv1.ReservationPlacement{Node: "later"}, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	f.waitHost(t, "later", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStatePending
	})
	ownHome(t)
	mary := loggedInTo(t, s.Config.Host, s.Config.CAData, f.member.BearerToken)
	out, code := mary.run("", "ssh", "acme/later", "--config-only")
	if code != cli.ExitConflict || !strings.Contains(out, "HostNotConnectable") || !strings.Contains(out, "state pending") ||
		!strings.Contains(out, "nodus hosts get acme/later") {
		t.Errorf("nodus ssh of a pending host: exit %d\n%s", code, out)
	}
}
