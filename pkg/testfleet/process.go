package testfleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// Process is nodus-server running as a child process.
type Process struct {
	Cmd        *exec.Cmd
	DataDir    string
	Kubeconfig string
	// Config authenticates as the bootstrap operator.
	Config *rest.Config
	Client versioned.Interface
	// Exited receives the process's end.
	Exited chan error
}

// StartServer starts binary with its data in dataDir on a free port, with
// flags, its output to out, and waits until it is ready.
func StartServer(binary, dataDir string, out io.Writer, flags ...string) (*Process, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--data-dir", dataDir, "--secure-port", strconv.Itoa(port)}, flags...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, DataDir: dataDir, Kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), Exited: make(chan error, 1)}
	go func() { p.Exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig); err == nil {
			client, err := versioned.NewForConfig(cfg)
			if err != nil {
				_ = p.Stop(time.Second)
				return nil, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			if err == nil {
				p.Config, p.Client = cfg, client
				return p, nil
			}
		}
		select {
		case err := <-p.Exited:
			return nil, fmt.Errorf("nodus-server exited during start-up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Stop(time.Second)
			return nil, fmt.Errorf("nodus-server not ready after 2m")
		}
	}
}

// Stop sends SIGTERM and waits for the exit, killing the process after
// timeout; it says whether the exit was clean and in time.
func (p *Process) Stop(timeout time.Duration) error {
	if p.Cmd.ProcessState != nil {
		return nil
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.Exited:
		return err
	case <-time.After(timeout):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
		return fmt.Errorf("nodus-server did not stop within %s of SIGTERM", timeout)
	}
}

// FreePort is a TCP port on the loopback that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
