package integration

import (
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnExecutionsOutputGoesWithIt runs executions to their end with
// output, one after another, and deletes each: the outputs, kept in etcd
// apart from the Executions, went nowhere, so a borrower running and
// deleting executions in a loop filled etcd at 256 KiB a round, past the
// project's bound of Executions. An ended execution's output is final: a
// second end report does not replace it. An output left behind (its
// delete failed) counts against the bound.
func TestAnExecutionsOutputGoesWithIt(t *testing.T) {
	testserver.KeepLogs(t)
	const bound = 3
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.MaxExecutionsPerProject = bound })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	node := "gpu-00"
	epoch := f.reservation(t, node).Status.Epoch
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":8,"maxExecutions":1}`, epoch)); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	beta := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	kept := func() int64 {
		t.Helper()
		resp, err := etcd.Get(ctx(t), executionlog.Prefix+"beta/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	output := strings.Repeat("x", 64<<10)
	run := func(round int) *nodusv1.Execution {
		t.Helper()
		e := f.submit(t, "beta", 1, 60)
		f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
		for _, rep := range []nodusv1.ExecutionReport{{Phase: nodusv1.ExecutionRunning},
			{Phase: nodusv1.ExecutionSucceeded, ExitCode: new(int32), Log: fmt.Sprintf("round %d\n%s", round, output)}} {
			if r := f.report(t, node, "beta", e.Name, rep); r.code != 200 && r.code != 201 {
				t.Fatalf("round %d, report %s: %d %s", round, rep.Phase, r.code, r.body)
			}
		}
		return e
	}

	for round := range 2 * bound {
		e := run(round)
		if err := beta.Delete(ctx(t), e.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: the borrower deletes its ended execution: %v", round, err)
		}
		if n := kept(); n != 0 {
			t.Fatalf("round %d: %d outputs kept after their executions were deleted", round, n)
		}
	}

	run(98)
	if err := s.Client.NodusV1().Executions("beta").DeleteCollection(ctx(t), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := kept(); n != 0 {
		t.Fatalf("an operator's delete of the project's executions kept %d outputs", n)
	}

	e := run(99)
	again := f.report(t, node, "beta", e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: new(int32), Log: "rewritten"})
	if again.code != 200 && again.code != 201 {
		t.Fatalf("a repeated end report: %d %s", again.code, again.body)
	}
	if r := do(t, f.borrowers["beta"], "GET", "/apis/nodus.dev/v1/namespaces/beta/executions/"+e.Name+"/log", "", nil); r.code != 200 ||
		!strings.HasPrefix(string(r.body), "round 99\n") {
		t.Errorf("a second end report replaced the output the borrower had read: %d %.40q", r.code, r.body)
	}

	// Two outputs whose executions' deletes did not reach them, with the one
	// above: the bound of 3 is reached.
	logs := executionlog.NewStore(etcd)
	for _, uid := range []types.UID{"11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"} {
		if err := logs.Put(ctx(t), "beta", "gone-"+string(uid[:4]), uid, executionlog.Log{Data: []byte("left")}); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, f.borrowers["beta"], "POST", "/apis/nodus.dev/v1/namespaces/beta/executions", "application/json", strings.NewReader(
		`{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"generateName":"job-"},"spec":{"pool":"gpu","command":["x"],"gpus":1,"maxRuntimeSeconds":60}}`))
	if r.code != 403 || envelopeOf(t, r).Reason != apierror.ReasonExecutionLimitReached {
		t.Errorf("one execution and two outputs left behind, bound 3: %d %s", r.code, r.body)
	}
}
