package integration

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testhost"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestACleaningResetsOnlyAccountsAnAccessUsed: the agent reset every
// account a cleaning request named (but root's, system ones and the
// borrowers'): a server that named a login account of the supplier's (a
// maintenance login no access ever used) had its processes ended and its
// home emptied, as root, on the server's word alone. An agent that manages
// the login group resets only accounts in it, or that an access it
// recorded names.
func TestACleaningResetsOnlyAccountsAnAccessUsed(t *testing.T) {
	name, uid, gid, home := homeAccount(t, "nodus-maint", "the account whose home is at stake")
	keep := filepath.Join(home, "keep")
	if err := os.WriteFile(keep, []byte("the supplier's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(keep, uid, gid); err != nil {
		t.Fatal(err)
	}

	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "maintained", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, dir)
	paths := scratchCleaningPaths(t)
	// The agent manages the login group (as with --sshd-drop-in): an
	// account outside it never let a tenant in.
	sshd := t.TempDir()
	a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, CleanCommand: "true", CleaningPaths: paths,
		SSHDDropIn: filepath.Join(sshd, "nodus.conf"), SSHDCAFile: filepath.Join(sshd, "ca.pub"), LoginGroup: "nodus-login-scope-test"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitNode(t, s, "maintained", func(n *nodusv1.Node) bool { return n.Status.AgentGeneration > 0 })

	// The server asks for a cleaning of the supplier's account.
	forgeNodeInEtcd(t, s, "maintained", func(n *nodusv1.Node) {
		n.Status.ProvisionState = nodusv1.ProvisionStateCleaning
		n.Status.Cleaning = &nodusv1.NodeCleaning{Request: 1, Phase: nodusv1.CleaningPending, Users: []string{name}}
	})
	cleaned := waitNode(t, s, "maintained", func(n *nodusv1.Node) bool {
		return n.Status.Cleaning != nil && n.Status.Cleaning.Phase != nodusv1.CleaningPending
	})
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the cleaning reset an account no access used: %v (evidence %+v)", err, cleaned.Status.Cleaning)
	}
	if c := cleaned.Status.Cleaning; !strings.Contains(strings.Join(c.Steps, "\n"), "left "+name+" alone") {
		t.Errorf("the cleaning's steps do not say the account was left: %+v", c)
	}
}

// homeAccount adds a login account of the test's own, with a home, gone
// with whatever runs as it when the test ends. It needs root (CI is root),
// and skips saying what the account is for where it cannot be added.
func homeAccount(t *testing.T, prefix, what string) (name string, uid, gid int, home string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root, to add %s (CI runs as root)", what)
	}
	name, uid, gid, remove, err := testhost.LoginAccount(prefix)
	if err != nil {
		t.Skipf("no account can be added here, for %s: %v", what, err)
	}
	t.Cleanup(remove)
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return name, uid, gid, u.HomeDir
}
