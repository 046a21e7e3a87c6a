package executions

import (
	"errors"

	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/sandbox"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// errStoppedWhilePreparing: the execution was stopped before its sandbox
// was ready (its stop's outcome is what is reported).
var errStoppedWhilePreparing = errors.New("stopped while its sandbox was being prepared")

// prepare prepares x's sandbox unless x is stopped first. A preparation can
// take minutes (an image unpacked the first time, or another execution's
// unpacking waited for), and a stop must not wait for it: the cancelled
// execution would be reported only after it, and a drain, which waits for
// every execution's report, would hold the release behind it. One abandoned
// goes on alone and removes what it made; it never runs, and holds its
// run's GPUs and account until it ends (x.prepared).
func (r *Runner) prepare(x *run, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	type prepared struct {
		box *sandbox.Sandbox
		err error
	}
	done := make(chan prepared, 1)
	go func() {
		box, err := r.opts.Sandbox.Prepare(spec)
		done <- prepared{box, err}
	}()
	select {
	case p := <-done:
		close(x.prepared)
		return p.box, p.err
	case <-x.stopping:
		go func() {
			defer close(x.prepared)
			if p := <-done; p.err == nil {
				if err := p.box.Close(); err != nil {
					klog.ErrorS(err, "removing the sandbox of an execution stopped while it was prepared", "execution", x.uid)
				}
			}
		}()
		return nil, errStoppedWhilePreparing
	}
}

// network is the sandbox network of e, as its pool's policy said when the
// scheduler placed it.
func network(e *nodusv1.Execution) string {
	if e.Status.Network == nodusv1.LendingNetworkEgress {
		return sandbox.NetworkEgress
	}
	return sandbox.NetworkNone
}
