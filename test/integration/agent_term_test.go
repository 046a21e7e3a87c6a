package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestATermEndsOnTheHostWithoutTheServer: a term's end is the server's to
// decide (its controller raises the epoch), but a host cut off from the
// server at that moment, or a server whose controllers have no leader
// then, must not keep the tenant in: certificates expire at the term's end
// for new logins, yet a live session (and a multiplexed ssh connection
// opening shells over it) would run on. The agent ends the access itself
// when the term it saw ends by its own clock: the principal is no longer
// served and the tenant's processes end. Here the agent's reservation
// watch is cut just before the end, so it never sees the server end it; a
// process that starts after the end (a login let in on a principal read
// just before it) ends too.
func TestATermEndsOnTheHostWithoutTheServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a process as the tenant's account (CI runs as root)")
	}
	login := loginAccount(t)
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: login}, dir)
	cut := make(chan struct{})
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if !strings.Contains(req.URL.Path, "/reservations") {
			return false
		}
		select {
		case <-cut:
			answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "cut off")
			return true
		default:
		}
		// A watch ends when the cut comes; the informer keeps what it saw.
		c, cancel := context.WithCancel(req.Context())
		defer cancel()
		go func() {
			select {
			case <-cut:
				cancel()
			case <-c.Done():
			}
		}()
		forward.ServeHTTP(w, req.WithContext(c))
		return true
	})
	socket := filepath.Join(dir, "p.sock")
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Socket: socket, Servers: []string{proxy}})
	principals := func() string {
		var out strings.Builder
		_ = agent.Principals(socket, login, &out)
		return strings.TrimSpace(out.String())
	}
	end := time.Now().Add(10 * time.Second).Truncate(time.Second)
	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), end)
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) { return principals() != "", nil }); err != nil {
		t.Fatalf("the agent never served the tenant's principal: %v", err)
	}
	session := sleepAs(t, login)
	close(cut)
	time.Sleep(time.Until(end))
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return principals() == "", nil }); err != nil {
		t.Errorf("the tenant's principal is served after its term ended: %q", principals())
	}
	select {
	case <-session:
	case <-time.After(10 * time.Second):
		t.Error("the tenant's process outlived its term on a host cut off from the server")
	}
	// A login sshd let in just before the end starts its first process
	// after it: that one ends too, while the host stays cut off.
	late := sleepAs(t, login)
	select {
	case <-late:
	case <-time.After(10 * time.Second):
		t.Error("a process of the tenant's that started after its term ended runs on a host cut off from the server")
	}
}

// loginAccount is a login account of the test's own, gone when it ends
// with whatever runs as it.
func loginAccount(t *testing.T) string {
	t.Helper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	login := "nodusl" + hex.EncodeToString(suffix)
	home := filepath.Join(t.TempDir(), login)
	if out, err := exec.Command("useradd", "--no-create-home", "--home-dir", home, "--shell", "/usr/sbin/nologin", login).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", login, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("pkill", "-KILL", "-u", login).Run()
		_ = exec.Command("userdel", login).Run()
	})
	return login
}
