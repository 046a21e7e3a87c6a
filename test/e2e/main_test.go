// Package e2e runs the real nodus-server binary, as the README starts it, and
// drives it with the installed kubectl.
package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var serverBinary, agentBinary, cliBinary string

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
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/nodus-dev/nodus/cmd/nodus-server",
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
	cmd        *exec.Cmd
	dataDir    string
	kubeconfig string
	stdout     *syncBuffer
	exited     chan error
}

// startServer runs nodus-server on dataDir and waits until kubectl reaches it.
func startServer(t *testing.T, dataDir string) *serverProcess {
	t.Helper()
	return startServerWith(t, dataDir)
}

// startServerWith starts nodus-server with extra flags.
func startServerWith(t *testing.T, dataDir string, flags ...string) *serverProcess {
	t.Helper()
	args := append([]string{"--data-dir", dataDir, "--secure-port", fmt.Sprint(freePort(t))}, flags...)
	cmd := exec.Command(serverBinary, args...)
	out := &syncBuffer{}
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProcess{cmd: cmd, dataDir: dataDir, kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), stdout: out, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })

	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(p.kubeconfig); err == nil {
			if _, _, err := p.kubectl("get", "--raw", "/readyz"); err == nil {
				return p
			}
		}
		select {
		case err := <-p.exited:
			t.Fatalf("nodus-server exited during start-up: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodus-server not ready after 2m:\n%s", out.String())
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *serverProcess) stop(t *testing.T) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		t.Errorf("nodus-server did not stop within a minute of SIGTERM")
		return <-p.exited
	}
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
