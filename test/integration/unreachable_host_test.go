package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnExecutionOnASilentHostEnds: an execution running on a host whose
// agent died stayed running for ever: its GPUs and its project's cap held,
// its project's deletion waiting, its borrower told nothing. Once its
// maximum runtime is long past and the agent is still silent, it ends,
// failed with reason HostUnreachable. Before that, or while the agent
// reports, it stays as the agent last said.
func TestAnExecutionOnASilentHostEnds(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 2, map[string]int32{"b1": 16}, false)
	for _, node := range []string{"gpu-00", "gpu-01"} {
		if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d}`, f.reservation(t, node).Status.Epoch)); r.code != 200 {
			t.Fatalf("lend %s: %d %s", node, r.code, r.body)
		}
	}
	running := map[string]string{} // node → execution
	for range 2 {
		e := f.submit(t, "b1", 8, 60)
		placed := f.waitExecution(t, "b1", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
		node := f.nodeOf(placed.Status.Host)
		if r := f.report(t, node, "b1", e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
			t.Fatalf("report running: %d %s", r.code, r.body)
		}
		running[node] = e.Name
	}
	if len(running) != 2 {
		t.Fatalf("two 8-GPU executions on two 8-GPU hosts: %v", running)
	}
	silent, alive := "gpu-00", "gpu-01"
	f.silence[silent]()
	time.Sleep(500 * time.Millisecond) // a beat in flight lands first
	// The liveness controller marks it so after three intervals; here at once.
	forgeNodeInEtcd(t, s, silent, func(n *nodusv1.Node) {
		meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionFalse,
			Reason: "HeartbeatMissing", Message: "forged by the test", LastTransitionTime: metav1.Now()})
	})
	waitNode(t, s, silent, func(n *nodusv1.Node) bool {
		return !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	})
	// Within its maximum runtime: a silent agent may still run it.
	time.Sleep(2 * time.Second)
	for node, name := range running {
		if e := f.waitExecution(t, "b1", name, func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionRunning {
			t.Fatalf("the execution on %s ended within its runtime: %+v", node, e.Status)
		}
	}
	// Started half an hour ago, with a minute to run: on the silent host
	// it ends; on the host whose agent reports, the agent says when it
	// ends.
	startedAgo := func(name string, ago time.Duration) {
		forgeInEtcd(t, s, "/registry/nodus.dev/executions/b1/"+name, func(e *nodusv1.Execution) {
			e.Status.StartedAt = &metav1.Time{Time: time.Now().Add(-ago).Truncate(time.Second)}
		})
	}
	for _, name := range running {
		startedAgo(name, 30*time.Minute)
	}
	ended := f.waitExecution(t, "b1", running[silent], func(e *nodusv1.Execution) bool { return e.Status.Phase != nodusv1.ExecutionRunning })
	if ended.Status.Phase != nodusv1.ExecutionFailed || ended.Status.Reason != "HostUnreachable" || ended.Status.FinishedAt == nil {
		t.Errorf("the execution on the silent host: %+v", ended.Status)
	}
	time.Sleep(2 * time.Second)
	if e := f.waitExecution(t, "b1", running[alive], func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionRunning {
		t.Errorf("the execution on the host whose agent reports was ended by the server: %+v", e.Status)
	}

	// An agent that reports but never ends an execution (at fault, or the
	// owner's, who is root on the host) held the borrower's GPUs, cap and
	// project deletion for as long as it liked. Past its maximum runtime
	// by more than six hours and ten minutes (room for an image that takes
	// long to prepare), the server ends it.
	startedAgo(running[alive], 2*time.Hour)
	time.Sleep(2 * time.Second)
	if e := f.waitExecution(t, "b1", running[alive], func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionRunning {
		t.Fatalf("an execution two hours past its runtime, on a host whose agent reports, was ended (an image may take hours to prepare): %+v", e.Status)
	}
	startedAgo(running[alive], 7*time.Hour)
	overdue := f.waitExecution(t, "b1", running[alive], func(e *nodusv1.Execution) bool { return e.Status.Phase != nodusv1.ExecutionRunning })
	if overdue.Status.Phase != nodusv1.ExecutionFailed || overdue.Status.Reason != "NotEndedByHost" || overdue.Status.FinishedAt == nil {
		t.Errorf("an execution its live agent let run two hours past its runtime: %+v", overdue.Status)
	}
	if r := f.report(t, alive, "b1", running[alive], nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded}); r.code != http.StatusConflict {
		t.Errorf("the agent's late report of an execution the server ended: %d %s", r.code, r.body)
	}
	// The same for a cancel the agent does not confirm: after fifteen
	// minutes the execution is cancelled without it.
	// Its maximum runtime (a minute) is past too, by half an hour, which
	// is not yet overdue: the cancel is what ends it.
	e := f.submit(t, "b1", 8, 60)
	f.waitExecution(t, "b1", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := f.report(t, alive, "b1", e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	if r := do(t, f.borrowers["b1"], "POST", "/apis/nodus.dev/v1/namespaces/b1/executions/"+e.Name+"/cancel", "application/json", strings.NewReader("{}")); r.code != 200 {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	time.Sleep(2 * time.Second)
	if e := f.waitExecution(t, "b1", e.Name, func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionRunning || e.Status.CancelRequestedAt == nil {
		t.Fatalf("a cancel just asked for ended the execution without its agent: %+v", e.Status)
	}
	forgeInEtcd(t, s, "/registry/nodus.dev/executions/b1/"+e.Name, func(e *nodusv1.Execution) {
		e.Status.StartedAt = &metav1.Time{Time: time.Now().Add(-30 * time.Minute).Truncate(time.Second)}
		e.Status.CancelRequestedAt = &metav1.Time{Time: time.Now().Add(-20 * time.Minute).Truncate(time.Second)}
	})
	cancelled := f.waitExecution(t, "b1", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase != nodusv1.ExecutionRunning })
	if cancelled.Status.Phase != nodusv1.ExecutionCancelled || !strings.Contains(cancelled.Status.Message, "did not confirm") {
		t.Errorf("a cancel its live agent did not confirm in twenty minutes: %+v", cancelled.Status)
	}
}
