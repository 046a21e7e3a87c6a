// Package shutdownsignal turns SIGTERM and Ctrl-C into a graceful shutdown,
// and a second one into an exit at once: a shutdown that waits on requests,
// a drain or a cleaning can take minutes, and whoever presses Ctrl-C twice
// has decided not to wait for it.
package shutdownsignal

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ExitCode is what the process exits with on the second signal: the
// shutdown did not finish.
const ExitCode = 1

// Context is cancelled at the first SIGTERM or SIGINT; the second exits the
// process with ExitCode, after a line on notices. stop releases the signals.
func Context(parent context.Context, name string, notices io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-signals:
			fmt.Fprintf(notices, "%s: %s: shutting down; a second signal exits at once\n", name, sig)
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-signals:
			fmt.Fprintf(notices, "%s: %s again: exiting before the shutdown is done\n", name, sig)
			os.Exit(ExitCode)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
}
