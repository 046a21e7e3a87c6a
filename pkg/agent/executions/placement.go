package executions

import (
	"errors"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// What the host checks of the server's placement of an execution before it
// runs it: the host is the owner's machine, and trusts the server's word
// for nothing it can check itself.

// agreement is the owner's lending agreement, and whether the host is lent.
func (r *Runner) agreement() (*nodusv1.ReservationLending, bool) {
	if r.opts.Lending == nil {
		return nil, true
	}
	a := r.opts.Lending()
	return a, a != nil
}

// checkPlacement refuses what the server says of an execution that this
// agent, as root, would otherwise turn unchecked into a path (the UID names
// the work directory and the sandbox), a command line, devices, or limits
// looser than the execution's share of what the owner lends (agreement).
func checkPlacement(e *nodusv1.Execution, agreement *nodusv1.ReservationLending) error {
	if id, err := uuid.Parse(string(e.UID)); err != nil || id.String() != string(e.UID) {
		return fmt.Errorf("its UID %q is not a UUID", e.UID)
	}
	if len(e.Spec.Command) == 0 || e.Spec.Command[0] == "" {
		return errors.New("it has no command")
	}
	if e.Spec.MaxRuntimeSeconds < 1 || e.Spec.MaxRuntimeSeconds > validation.MaxExecutionRuntime {
		// A runtime past int64 nanoseconds would be no limit at all.
		return fmt.Errorf("its maximum runtime of %ds is not between 1 s and %d s", e.Spec.MaxRuntimeSeconds, validation.MaxExecutionRuntime)
	}
	if len(e.Status.GPUIndices) != int(e.Spec.GPUs) {
		return fmt.Errorf("it is placed on %d GPUs, and asked for %d", len(e.Status.GPUIndices), e.Spec.GPUs)
	}
	seen := map[int32]bool{}
	for _, g := range e.Status.GPUIndices {
		if g < 0 || seen[g] {
			return fmt.Errorf("its GPU indices %v are not distinct GPUs", e.Status.GPUIndices)
		}
		seen[g] = true
	}
	if agreement != nil && e.Spec.GPUs > agreement.MaxGPUs {
		return fmt.Errorf("it asks for %d GPUs, and the owner lends %d", e.Spec.GPUs, agreement.MaxGPUs)
	}
	memoryMiB, milliCPUs := lending.ExecutionLimits(agreement, e.Spec.GPUs)
	for _, l := range []struct {
		what                string
		limit, share, bound int64
	}{
		// The bounds keep the limits from overflowing once turned into
		// bytes and a CFS quota (0 is no limit to the sandbox).
		{"memory limit (MiB)", e.Status.MemoryLimitMiB, memoryMiB, 1 << 40},
		{"CPU limit (thousandths of a CPU)", e.Status.MilliCPUs, milliCPUs, 1 << 40},
	} {
		if l.limit < 0 || l.limit > l.bound {
			return fmt.Errorf("its %s %d is out of range", l.what, l.limit)
		}
		if agreement == nil {
			continue
		}
		// A limit of 0 is no limit at all; so is a share of 0, an agreement
		// without that cap on a host whose figures this agent has not read
		// (the agent fills in the caps a lend leaves out).
		if l.share == 0 {
			return fmt.Errorf("the owner's agreement sets no %s, and this agent has not read the host's yet", l.what)
		}
		if l.limit == 0 || l.limit > l.share {
			return fmt.Errorf("its %s %d is not within its share of what the owner lends, %d", l.what, l.limit, l.share)
		}
	}
	return nil
}

// overShare names what e would take past what the owner lends
// (agreement), beside the executions running here: "GPUs", "executions",
// "memory", "CPUs", or "" when it fits. The owner's machine does not take
// the server's word that borrowers together stay within the agreement; e
// waits, as it waits for GPUs held. One whose own asks pass the agreement
// waits for nothing: checkPlacement refuses it. r.mu is held.
func (r *Runner) overShare(agreement *nodusv1.ReservationLending, e *nodusv1.Execution) string {
	if agreement == nil {
		return ""
	}
	var heldGPUs, heldMiB, heldMilliCPUs int64
	for _, x := range r.runs {
		heldGPUs += int64(len(x.gpus))
		heldMiB, heldMilliCPUs = heldMiB+x.memoryMiB, heldMilliCPUs+x.milliCPUs
	}
	waits := func(own, held, lent int64) bool { return lent > 0 && own <= lent && held+own > lent }
	switch {
	case waits(int64(len(e.Status.GPUIndices)), heldGPUs, int64(agreement.MaxGPUs)):
		return "GPUs"
	case waits(1, int64(len(r.runs)), int64(agreement.MaxExecutions)):
		return "executions"
	case waits(e.Status.MemoryLimitMiB, heldMiB, agreement.MemoryMiB):
		return "memory"
	case waits(e.Status.MilliCPUs, heldMilliCPUs, agreement.MilliCPUs):
		return "CPUs"
	}
	return ""
}

// Trim stops the executions that run beyond the owner's agreement: an
// owner who lends the host again with smaller caps gets back what it no
// longer lends (within the grace), as a withdrawal gives back everything,
// instead of borrowers keeping it until their executions end. Oldest
// first, each that fits beside those kept is kept, and the others are
// stopped. Executions already being stopped, or that ended and wait for
// their report, count for nothing. One started on the agreement before
// the change, at the moment of it, is stopped at the next event of the
// node or its reservations. Not lent, there is nothing to trim: the drain
// stops everything.
func (r *Runner) Trim() {
	agreement, lent := r.agreement()
	if !lent || agreement == nil {
		return
	}
	r.mu.Lock()
	running := make([]*run, 0, len(r.runs))
	for _, x := range r.runs {
		select {
		case <-x.done:
			continue // ended: it holds nothing
		default:
		}
		if x.stopped() == nil {
			running = append(running, x)
		}
	}
	r.mu.Unlock()
	sort.Slice(running, func(i, j int) bool { return running[i].since.Before(running[j].since) })
	// A cap of 0 is none, as for a start (overShare), but for GPUs: none lent.
	within := func(held, lent int64) bool { return lent <= 0 || held <= lent }
	var gpus, count, memoryMiB, milliCPUs int64
	for _, x := range running {
		g, n, m, c := gpus+int64(len(x.gpus)), count+1, memoryMiB+x.memoryMiB, milliCPUs+x.milliCPUs
		if g <= int64(agreement.MaxGPUs) && within(n, int64(agreement.MaxExecutions)) && within(m, agreement.MemoryMiB) && within(c, agreement.MilliCPUs) {
			gpus, count, memoryMiB, milliCPUs = g, n, m, c
			continue
		}
		klog.InfoS("stopping an execution beyond what the owner lends now", "execution", x.uid,
			"maxGPUs", agreement.MaxGPUs, "maxExecutions", agreement.MaxExecutions, "memoryMiB", agreement.MemoryMiB, "milliCPUs", agreement.MilliCPUs)
		r.stop(x, outcome{phase: nodusv1.ExecutionDrained, reason: ReasonDrained,
			message: "the owner lends the host with smaller caps now: executions that do not fit beside older ones were stopped"})
	}
}
