package scheduler

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// The ends the server writes for executions: when no agent will (its host
// gone or silent), when its agent would not (it reports, and does not end
// it), and when the host stopped being lent before it started.

// unreachableAfter is how long past an execution's maximum runtime (from
// its start, or its placement when it never started) its host's agent may
// stay silent before the execution is taken for ended. By then a live agent
// stopped it (its own timer, then the grace between TERM and KILL), and a
// restarted one ends what an earlier one left before it reports again, so
// the host takes no placement while the execution could still run there.
const unreachableAfter = 10 * time.Minute

// endedByServer is e, placed on node (nil: deleted), as the server ends it
// when no agent will, or when its agent would not; nil while it is the
// agent's to end.
func endedByServer(e *nodusv1.Execution, node *nodusv1.Node, now metav1.Time) *nodusv1.Execution {
	ready := node != nil && meta.IsStatusConditionTrue(node.Status.Conditions, nodusv1.NodeConditionReady)
	switch {
	case node == nil && e.Status.Phase == nodusv1.ExecutionRunning:
		// The operator deleted the node: no agent will ever report it.
		return hostLost(e, now)
	case node != nil && !ready && outlived(e, now.Time):
		return hostUnreachable(e, now)
	case ready && e.Status.Phase == nodusv1.ExecutionRunning && stopUnconfirmed(e, now.Time):
		return stoppedByServer(e, now)
	case ready && overdue(e, now.Time):
		return notEndedByHost(e, now)
	}
	return nil
}

// overdueAfter is how long past unreachableAfter an execution may stay
// scheduled or running on a host whose agent reports. Its maximum runtime
// counts from when the agent took it on, its agent's timer from when its
// sandbox was ready: the margin is for an image that takes long to
// prepare (six hours) and for the agent's grace between TERM and KILL. An
// agent that reports and still does not end it (at fault, or the owner's,
// who is root there) would hold the borrower's GPUs, cap and project
// deletion for as long as it likes; stopAfter is the same for a cancel or
// a drain it does not confirm.
const (
	overdueAfter = 6 * time.Hour
	stopAfter    = 15 * time.Minute
)

// overdue says whether e is past its maximum runtime by unreachableAfter
// and overdueAfter.
func overdue(e *nodusv1.Execution, now time.Time) bool {
	return outlived(e, now.Add(-overdueAfter))
}

// stopUnconfirmed says whether e, running, was asked to stop (cancelled,
// drained) longer than stopAfter ago.
func stopUnconfirmed(e *nodusv1.Execution, now time.Time) bool {
	asked := e.Status.CancelRequestedAt
	if asked == nil {
		asked = e.Status.DrainRequestedAt
	}
	return asked != nil && now.After(asked.Add(stopAfter))
}

// notEndedByHost is e ended by the server because its host's agent, alive,
// let it run past its maximum runtime: its agent, which sees only
// unfinished executions, stops it if it still runs it.
func notEndedByHost(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := e.DeepCopy()
	w.Status.Phase, w.Status.FinishedAt = nodusv1.ExecutionFailed, &now
	w.Status.Reason = "NotEndedByHost"
	w.Status.Message = fmt.Sprintf("its host's agent, which reports, neither ended it nor said so within %s past its maximum runtime (counted from when the host took it on): the server ended it; whether it still ran is unknown",
		unreachableAfter+overdueAfter)
	return w
}

// stoppedByServer is e, asked to stop, ended by the server because its
// host's agent did not confirm the stop in time: cancelled or drained, as
// it was asked.
func stoppedByServer(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := e.DeepCopy()
	w.Status.FinishedAt = &now
	if e.Status.CancelRequestedAt != nil {
		w.Status.Phase, w.Status.Reason = nodusv1.ExecutionCancelled, "Cancelled"
	} else {
		w.Status.Phase, w.Status.Reason = nodusv1.ExecutionDrained, "Drained"
	}
	w.Status.Message = fmt.Sprintf("its host's agent did not confirm the stop within %s: the server ended it; whether it still ran is unknown", stopAfter)
	return w
}

// outlived says whether e, scheduled or running, is past its maximum
// runtime by unreachableAfter.
func outlived(e *nodusv1.Execution, now time.Time) bool {
	since := e.Status.StartedAt
	if since == nil {
		since = e.Status.ScheduledAt
	}
	return since != nil && now.After(since.Add(time.Duration(e.Spec.MaxRuntimeSeconds)*time.Second+unreachableAfter))
}

// hostUnreachable is e ended because its host's agent went silent and e
// outlived its maximum runtime: the borrower's GPUs and cap are free again,
// and its project may be deleted.
func hostUnreachable(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := e.DeepCopy()
	w.Status.Phase, w.Status.FinishedAt = nodusv1.ExecutionFailed, &now
	w.Status.Reason = "HostUnreachable"
	w.Status.Message = "its host's agent stopped reporting, and its maximum runtime passed long ago; whether it ran to its end is unknown"
	return w
}

func hostLost(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := e.DeepCopy()
	w.Status.Phase, w.Status.FinishedAt = nodusv1.ExecutionFailed, &now
	w.Status.Reason, w.Status.Message = "HostLost", "the host it ran on was removed from Nodus; whether it ran to its end is unknown"
	return w
}

// notLentTo is e, placed but not started, drained because its pool no
// longer lends to its project.
func notLentTo(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := drained(e, now)
	w.Status.Message = fmt.Sprintf("pool %s no longer lends to project %s: it was placed, and never started", e.Spec.Pool, e.Namespace)
	return w
}

// drained is e, placed but not started, ended because its host stopped
// being lent.
func drained(e *nodusv1.Execution, now metav1.Time) *nodusv1.Execution {
	w := e.DeepCopy()
	w.Status.Phase, w.Status.FinishedAt = nodusv1.ExecutionDrained, &now
	w.Status.Reason, w.Status.Message = "Drained", "the host stopped being lent before the execution started"
	return w
}
