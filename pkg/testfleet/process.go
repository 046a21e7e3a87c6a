package testfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/freeport"
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
// flags, its output to out, and waits until it is ready. When another
// process took the port between its pick and the server's bind, it starts
// the server again on another.
func StartServer(binary, dataDir string, out io.Writer, flags ...string) (*Process, error) {
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p, err := StartServerOn(port, binary, dataDir, out, flags...)
		if errors.Is(err, ErrPortTaken) && attempt < 3 {
			continue
		}
		return p, err
	}
}

// ErrPortTaken is a start-up that failed because the secure port was taken.
var ErrPortTaken = errors.New("the secure port was taken")

// StartServerOn is StartServer on port; it fails with ErrPortTaken when
// another process listens there.
func StartServerOn(port int, binary, dataDir string, out io.Writer, flags ...string) (*Process, error) {
	args := append([]string{"--data-dir", dataDir, "--secure-port", strconv.Itoa(port)}, flags...)
	cmd := exec.Command(binary, args...)
	// The start-up's last output tells a taken port from other failures.
	tail := &tailBuffer{}
	cmd.Stdout = io.MultiWriter(out, tail)
	cmd.Stderr = cmd.Stdout
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
			if tail.contains(fmt.Sprintf(":%d: bind: address already in use", port)) {
				return nil, fmt.Errorf("nodus-server exited during start-up: %v: %w", err, ErrPortTaken)
			}
			return nil, fmt.Errorf("nodus-server exited during start-up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.Stop(time.Second)
			return nil, fmt.Errorf("nodus-server not ready after 2m")
		}
	}
}

// tailBuffer keeps the last 16 KiB written to it.
type tailBuffer struct {
	mu   sync.Mutex
	data []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = append(b.data, p...)
	if over := len(b.data) - 16<<10; over > 0 {
		b.data = append(b.data[:0], b.data[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.data, []byte(s))
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

// FreePort is a TCP port on the loopback that was free a moment ago, below
// the ephemeral range (package freeport).
func FreePort() (int, error) { return freeport.Pick() }
