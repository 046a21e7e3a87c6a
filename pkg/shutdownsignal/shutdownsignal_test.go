package shutdownsignal_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/shutdownsignal"
)

// The child half of the tests: a process that takes the signals as the
// servers do and then never finishes its shutdown.
func TestMain(m *testing.M) {
	if os.Getenv("SHUTDOWNSIGNAL_CHILD") != "" {
		ctx, stop := shutdownsignal.Context(context.Background(), "child", os.Stderr)
		defer stop()
		os.Stdout.WriteString("ready\n")
		<-ctx.Done()
		os.Stdout.WriteString("shutting down\n")
		select {}
	}
	os.Exit(m.Run())
}

func startChild(t *testing.T) (*exec.Cmd, *lineReader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "SHUTDOWNSIGNAL_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := newLineReader(out)
	lines.expect(t, "ready")
	return cmd, lines, &stderr
}

func TestTheFirstSignalCancelsAndTheSecondExits(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, lines, stderr := startChild(t)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			lines.expect(t, "shutting down")
			// The shutdown never ends: only the second signal ends the process.
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				t.Fatalf("the process exited after one signal: %v; stderr: %s", err, stderr)
			case <-time.After(200 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != shutdownsignal.ExitCode {
					t.Fatalf("exit after the second signal: %v, want code %d; stderr: %s", err, shutdownsignal.ExitCode, stderr)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the process did not exit after a second signal; stderr: %s", stderr)
			}
			if !strings.Contains(stderr.String(), "a second signal exits at once") || !strings.Contains(stderr.String(), "again: exiting") {
				t.Fatalf("stderr does not say what the signals did: %q", stderr)
			}
		})
	}
}

func TestStopEndsTheContext(t *testing.T) {
	ctx, stop := shutdownsignal.Context(context.Background(), "test", new(bytes.Buffer))
	stop()
	if ctx.Err() == nil {
		t.Fatal("stop left the context open")
	}
}
