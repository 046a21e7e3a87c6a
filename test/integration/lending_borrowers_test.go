package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestABorrowerThePoolNoLongerLendsToRunsNothingMore: an operator takes a
// project off a pool's borrowers, or closes the pool's lending. Its pending
// executions waited, saying why; those already placed went on: a scheduled
// one started whenever the host's agent got to it, a running one ran to its
// maximum runtime. Now a scheduled one drains and a running one is asked to
// drain, as when the owner withdraws the host; another borrower's go on
// until the pool closes.
func TestABorrowerThePoolNoLongerLendsToRunsNothingMore(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8, "gamma": 8}, false)
	node := "gpu-00"
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":8}`, f.reservation(t, node).Status.Epoch)); r.code != 200 {
		t.Fatalf("acme lends: %d %s", r.code, r.body)
	}
	scheduled := func(project string) *nodusv1.Execution {
		t.Helper()
		e := f.submit(t, project, 1, 3600)
		return f.waitExecution(t, project, e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	}
	started := func(project string) *nodusv1.Execution {
		t.Helper()
		e := scheduled(project)
		if r := f.report(t, node, project, e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
			t.Fatalf("%s's execution starts: %d %s", project, r.code, r.body)
		}
		return f.waitExecution(t, project, e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionRunning })
	}
	running, waiting := started("beta"), scheduled("beta")
	othersRunning, othersWaiting := started("gamma"), scheduled("gamma")
	stopped := func(project string, running, waiting *nodusv1.Execution) {
		t.Helper()
		drained := f.waitExecution(t, project, waiting.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionDrained })
		if drained.Status.Reason != "Drained" || drained.Status.FinishedAt == nil || !strings.Contains(drained.Status.Message, "no longer lends to project "+project) {
			t.Errorf("%s's execution placed, not started: %+v", project, drained.Status)
		}
		if r := f.report(t, node, project, waiting.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != http.StatusConflict ||
			envelopeOf(t, r).Reason != apierror.ReasonExecutionFinished {
			t.Errorf("%s's drained execution started: %d %s", project, r.code, r.body)
		}
		asked := f.waitExecution(t, project, running.Name, func(e *nodusv1.Execution) bool { return e.Status.DrainRequestedAt != nil })
		if asked.Status.Phase != nodusv1.ExecutionRunning || asked.Status.Message != "pool gpu no longer lends to project "+project+"; the host stops it" {
			t.Errorf("%s's running execution, asked to drain: %s %q", project, asked.Status.Phase, asked.Status.Message)
		}
		if r := f.report(t, node, project, running.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionDrained, Reason: "Drained"}); r.code != 200 {
			t.Errorf("%s's running execution reported drained: %d %s", project, r.code, r.body)
		}
	}

	f.changePool(t, func(l *nodusv1.PoolLending) {
		l.Borrowers = slices.DeleteFunc(l.Borrowers, func(b nodusv1.PoolBorrower) bool { return b.Project == "beta" })
	})
	stopped("beta", running, waiting)
	// The other borrower's go on: its scheduled execution still starts.
	if e, err := s.Client.NodusV1().Executions("gamma").Get(ctx(t), othersRunning.Name, metav1.GetOptions{}); err != nil ||
		e.Status.Phase != nodusv1.ExecutionRunning || e.Status.DrainRequestedAt != nil {
		t.Errorf("another borrower's running execution after beta was taken off: %v %+v", err, e.Status)
	}
	if r := f.report(t, node, "gamma", othersWaiting.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Errorf("another borrower's scheduled execution starts after beta was taken off: %d %s", r.code, r.body)
	}
	othersWaiting = scheduled("gamma")

	f.changePool(t, func(l *nodusv1.PoolLending) { l.Open = false })
	stopped("gamma", othersRunning, othersWaiting)
}
