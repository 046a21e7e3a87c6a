package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestBorrowersTogetherUseNoMoreThanTheOwnerLends: the agreement's memory
// and CPUs are what the host's borrowers use together (docs/lending.md).
// An execution with GPUs is given its GPUs' share of them and one without
// an execution's share; mixed, the shares added up to more than was lent
// (4 of 8 GPUs lent: a 4-GPU execution took all of the lent half, and three
// without GPUs another eighth each). One that does not fit waits.
func TestBorrowersTogetherUseNoMoreThanTheOwnerLends(t *testing.T) {
	f := newLendingFleet(t, testserver.StartTestServer(t), 1, map[string]int32{"beta": 8}, false)
	node := "gpu-00"
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":4}`, f.reservation(t, node).Status.Epoch)); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	n, err := f.s.Client.NodusV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lent := lending.WithHostShare(f.reservation(t, node).Status.Lending, &n.Status.Inventory)

	big := f.submit(t, "beta", 4, 60)
	f.waitExecution(t, "beta", big.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	var small []*nodusv1.Execution
	for i := 0; i < 3; i++ {
		small = append(small, f.submit(t, "beta", 0, 60))
	}
	for _, e := range small {
		f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool {
			return e.Status.Reason == "Waiting" || e.Status.Phase == nodusv1.ExecutionScheduled
		})
	}
	list, err := f.s.Client.NodusV1().Executions("beta").List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var memory, cpus int64
	for _, e := range list.Items {
		if e.Status.Phase == nodusv1.ExecutionScheduled {
			memory, cpus = memory+e.Status.MemoryLimitMiB, cpus+e.Status.MilliCPUs
		}
	}
	if memory > lent.MemoryMiB || cpus > lent.MilliCPUs {
		t.Errorf("the placed executions together are given %d MiB and %d millicpus; the owner lends %d MiB and %d", memory, cpus, lent.MemoryMiB, lent.MilliCPUs)
	}

	// The big one ends: what waited for its share is placed.
	for _, rep := range []nodusv1.ExecutionReport{{Phase: nodusv1.ExecutionRunning, Reason: "Started"}, {Phase: nodusv1.ExecutionSucceeded, Reason: "Exited"}} {
		rep.UID = big.UID
		if r := f.report(t, node, "beta", big.Name, rep); r.code != http.StatusOK {
			t.Fatalf("report %s: %d %s", rep.Phase, r.code, r.body)
		}
	}
	for _, e := range small {
		f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	}
}

// TestABorrowersExecutionsWithoutGPUsHaveACap: an execution without GPUs
// counts against no GPU cap, so a borrower could take every execution slot
// of a pool's lent hosts with them and leave other borrowers waiting. A
// pool's borrower may be given maxExecutions: its executions placed at
// once, with GPUs or without.
func TestABorrowersExecutionsWithoutGPUsHaveACap(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8, "gamma": 8}, false)
	pools := s.Client.NodusV1().Pools()
	if _, err := pools.Patch(ctx(t), "gpu", types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/lending/borrowers/0/maxExecutions","value":-1}]`), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a negative maxExecutions: %v, want 422", err)
	}
	pool, err := pools.Get(ctx(t), "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	for i := range pool.Spec.Lending.Borrowers {
		if pool.Spec.Lending.Borrowers[i].Project == "beta" {
			pool.Spec.Lending.Borrowers[i].MaxExecutions = &two
		}
	}
	if _, err := pools.Update(ctx(t), pool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := "gpu-00"
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d}`, f.reservation(t, node).Status.Epoch)); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	var beta []*nodusv1.Execution
	for i := 0; i < 4; i++ {
		beta = append(beta, f.submit(t, "beta", 0, 60))
	}
	phases := func() (scheduled []*nodusv1.Execution, waiting int) {
		for _, e := range beta {
			got := f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool {
				return e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Reason == "Waiting"
			})
			if got.Status.Phase == nodusv1.ExecutionScheduled {
				scheduled = append(scheduled, got)
			} else if strings.Contains(got.Status.Message, "cap of 8 GPUs and 2 executions at once") {
				waiting++
			}
		}
		return scheduled, waiting
	}
	scheduled, waiting := phases()
	if len(scheduled) != 2 || waiting != 2 {
		t.Fatalf("a borrower capped at 2 executions, 4 submitted without GPUs: %d placed, %d waiting for the cap", len(scheduled), waiting)
	}
	gamma := f.submit(t, "gamma", 0, 60)
	f.waitExecution(t, "gamma", gamma.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })

	ended := scheduled[0]
	for _, rep := range []nodusv1.ExecutionReport{{Phase: nodusv1.ExecutionRunning, Reason: "Started"}, {Phase: nodusv1.ExecutionSucceeded, Reason: "Exited"}} {
		rep.UID = ended.UID
		if r := f.report(t, node, "beta", ended.Name, rep); r.code != http.StatusOK {
			t.Fatalf("report %s: %d %s", rep.Phase, r.code, r.body)
		}
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		list, err := s.Client.NodusV1().Executions("beta").List(c, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		placed := 0
		for _, e := range list.Items {
			if e.Status.Phase == nodusv1.ExecutionScheduled {
				placed++
			}
		}
		return placed == 2, nil
	}); err != nil {
		t.Error("an execution waiting for the cap was not placed once one of the two ended")
	}
}

// TestAWaitingExecutionIsNotWrittenAgainAsThePoolMoves: an execution
// waiting for room stays as it was written while other executions start
// and end. Its message said what held it back now: how many GPUs its
// borrower held, or that no lent host had room; every start and end moved
// one or the other, and rewrote each of the borrower's waiting executions
// (a borrower cycling short executions beside a thousand big waiting ones
// wrote them all at each turn).
func TestAWaitingExecutionIsNotWrittenAgainAsThePoolMoves(t *testing.T) {
	f := newLendingFleet(t, testserver.StartTestServer(t), 1, map[string]int32{"beta": 4, "gamma": 8}, false)
	node := "gpu-00"
	// The host lends 4 GPUs: beta's three and gamma's one fill it.
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":4}`, f.reservation(t, node).Status.Epoch)); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	placedOne := func(project string) *nodusv1.Execution {
		t.Helper()
		e := f.submit(t, project, 1, 60)
		return f.waitExecution(t, project, e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	}
	var beta []*nodusv1.Execution
	for range 3 {
		beta = append(beta, placedOne("beta"))
	}
	placedOne("gamma")
	waiting := f.submit(t, "beta", 2, 60)
	before := f.waitExecution(t, "beta", waiting.Name, func(e *nodusv1.Execution) bool { return e.Status.Reason == "Waiting" })
	if !strings.Contains(before.Status.Message, "cap of 4 GPUs") {
		t.Errorf("the waiting execution's message: %q", before.Status.Message)
	}

	// One of beta's ends: it holds 2 of its 4, and the host has one GPU
	// free, not the two the waiting one needs: it waits for the host now.
	ended := beta[1]
	for _, rep := range []nodusv1.ExecutionReport{{Phase: nodusv1.ExecutionRunning, Reason: "Started"}, {Phase: nodusv1.ExecutionSucceeded, Reason: "Exited"}} {
		rep.UID = ended.UID
		if r := f.report(t, node, "beta", ended.Name, rep); r.code != http.StatusOK {
			t.Fatalf("report %s: %d %s", rep.Phase, r.code, r.body)
		}
	}
	// Another of beta's, of one GPU, takes the free one: beta holds 3 of
	// its 4, and the waiting one waits for the cap again.
	placedOne("beta")
	after, err := f.s.Client.NodusV1().Executions("beta").Get(ctx(t), waiting.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Reason != "Waiting" {
		t.Fatalf("the 2-GPU execution no longer waits: %s %s", after.Status.Reason, after.Status.Message)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the waiting execution was written again while the pool moved: %q, then %q", before.Status.Message, after.Status.Message)
	}
}
