// Package e2e runs the real nodus-server binary, as the README starts it, and
// drives it with the installed kubectl.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

var serverBinary, agentBinary, cliBinary string

// buildVersion is the version the binaries under test are stamped with, in
// the form `make build` gives them.
const buildVersion = "v0.1.0-e2e"

func TestMain(m *testing.M) {
	// sshd runs nodusd as AuthorizedPrincipalsCommand only from a path that
	// root owns all the way up and nobody else may write: not under /tmp.
	parent := ""
	if os.Geteuid() == 0 {
		parent = "/opt"
		if err := os.MkdirAll(parent, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp(parent, "nodus-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverBinary = filepath.Join(dir, "nodus-server")
	agentBinary = filepath.Join(dir, "nodusd")
	cliBinary = filepath.Join(dir, "nodus")
	// Stamped as `make build` stamps them, so that the tests run the
	// binaries as they ship.
	build := exec.Command("go", "build", "-ldflags", "-X k8s.io/component-base/version.gitVersion="+buildVersion+
		" -X main.version="+buildVersion+" -X github.com/nodus-dev/nodus/pkg/cli.Version="+buildVersion,
		"-o", dir+"/", "github.com/nodus-dev/nodus/cmd/nodus-server",
		"github.com/nodus-dev/nodus/cmd/nodusd", "github.com/nodus-dev/nodus/cmd/nodus")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build nodus-server and nodusd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serverProcess is a running nodus-server binary.
type serverProcess struct {
	*testfleet.Process
	dataDir    string
	kubeconfig string
	stdout     *syncBuffer
}

// startServer runs nodus-server on dataDir and waits until kubectl reaches it.
func startServer(t *testing.T, dataDir string) *serverProcess {
	t.Helper()
	return startServerWith(t, dataDir)
}

// startServerWith starts nodus-server with extra flags.
func startServerWith(t *testing.T, dataDir string, flags ...string) *serverProcess {
	t.Helper()
	out := &syncBuffer{}
	p, err := testfleet.StartServer(serverBinary, dataDir, out, flags...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := &serverProcess{Process: p, dataDir: dataDir, kubeconfig: p.Kubeconfig, stdout: out}
	t.Cleanup(func() { _ = s.stop(t) })
	if _, errOut, err := s.kubectl("get", "--raw", "/readyz"); err != nil {
		t.Fatalf("kubectl cannot reach nodus-server: %v %s", err, errOut)
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (p *serverProcess) stop(t *testing.T) error {
	err := p.Stop(time.Minute)
	if err != nil && strings.Contains(err.Error(), "did not stop") {
		t.Error(err)
	}
	return err
}

// kubectl runs the installed kubectl against the server as the bootstrap operator.
func (p *serverProcess) kubectl(args ...string) (string, string, error) {
	return p.kubectlIn(nil, args...)
}

func (p *serverProcess) kubectlIn(stdin []byte, args ...string) (string, string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", p.kubeconfig, "--request-timeout", "30s"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// must runs kubectl and fails the test on error.
func (p *serverProcess) must(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := p.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func (p *serverProcess) apply(t *testing.T, manifest string, args ...string) string {
	t.Helper()
	out, errOut, err := p.kubectlIn([]byte(manifest), append(args, "-f", "-")...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func requireKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed; these tests check nodus-server against the real kubectl")
	}
}

func freePort(t *testing.T) int {
	port, err := testfleet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
