package integration

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnAgentReadsNoEarlierBorrowersRun: an agent's credential reads only
// the executions its host runs now (a tenant with root there may hold a
// copy). Asked for an older revision, a list (resourceVersionMatch Exact)
// or a watch replayed the executions that ran there, their command and
// environment, from etcd's history and the watch cache's.
func TestAnAgentReadsNoEarlierBorrowersRun(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	const node = "gpu-00"
	agent := versioned.NewForConfigOrDie(f.agents[node]).NodusV1().Executions("")
	onHost := metav1.ListOptions{FieldSelector: "status.host=" + f.aliases[node]}
	before, err := agent.List(ctx(t), onHost)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d}`, f.reservation(t, node).Status.Epoch)); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	// As `kubectl apply` makes it: its annotation holds the spec again.
	placed, err := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta").Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Labels: map[string]string{"team": "vision"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"command":["train"]}}`}},
		Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := f.waitExecution(t, "beta", placed.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning}); r.code != 200 {
		t.Fatalf("report running: %d %s", r.code, r.body)
	}
	zero := int32(0)
	if r := f.report(t, node, "beta", placed.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, ExitCode: &zero, Reason: "Exited"}); r.code != 200 {
		t.Fatalf("report succeeded: %d %s", r.code, r.body)
	}
	f.waitExecution(t, "beta", placed.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionSucceeded })
	revealed := func(e *nodusv1.Execution) bool {
		return e.UID == placed.UID && (len(e.Spec.Command) > 0 || len(e.Annotations) > 0 || len(e.Labels) > 0 || len(e.ManagedFields) > 0)
	}

	// Its list at the revision it was placed at, from etcd's history.
	exact := onHost
	exact.ResourceVersion, exact.ResourceVersionMatch = running.ResourceVersion, metav1.ResourceVersionMatchExact
	list, err := agent.List(ctx(t), exact)
	if err != nil {
		t.Fatalf("a list at resourceVersion %s: %v", running.ResourceVersion, err)
	}
	for i := range list.Items {
		if revealed(&list.Items[i]) {
			t.Errorf("a list at resourceVersion %s showed the finished execution's command: %v", running.ResourceVersion, list.Items[i].Spec.Command)
		}
	}
	// Its watch from before it was placed, from the watch cache.
	from := onHost
	from.ResourceVersion = before.ResourceVersion
	w, err := agent.Watch(ctx(t), from)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// It is told that the execution left (by UID: it may run it still),
	// and nothing of what it ran.
	for timeout := time.After(10 * time.Second); ; {
		select {
		case e := <-w.ResultChan():
			x, ok := e.Object.(*nodusv1.Execution)
			if ok && revealed(x) {
				t.Errorf("a watch from resourceVersion %s showed the finished execution in a %s event: %v %v", before.ResourceVersion, e.Type, x.Spec.Command, x.Annotations)
			}
			if e.Type == watch.Error {
				t.Fatalf("the watch ended: %+v", e.Object)
			}
			if ok && e.Type == watch.Deleted && x.UID == placed.UID {
				return
			}
		case <-timeout:
			t.Fatal("the watch from before the execution did not say it left")
		}
	}
}
