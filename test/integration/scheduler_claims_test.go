package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestTwoSchedulersNeverPlaceAGPUTwice runs, beside the elected scheduler,
// a second one with its own informers and memory: an old leader that has
// not noticed yet that it lost the lead. Together they place each GPU
// once. Most of their races end in a conflict on the Execution itself
// (this test passed before GPU claims, too); the claims in etcd cover the
// rest, two executions placed on one GPU from two views
// (pkg/controller/scheduler TestGPUClaimsAreExclusive).
func TestTwoSchedulersNeverPlaceAGPUTwice(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 2, map[string]int32{"beta": 1000}, false)
	for _, node := range []string{"gpu-00", "gpu-01"} {
		if r := f.lend(t, f.admin, "lend", node, `{"epoch":1}`); r.code != 200 {
			t.Fatalf("lend %s: %d %s", node, r.code, r.body)
		}
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	factory := externalversions.NewSharedInformerFactory(s.Client, 0)
	stale, err := scheduler.New(versioned.NewForConfigOrDie(s.ServerConfig), factory, etcd)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(runCtx.Done())
	go stale.Run(runCtx)

	const submitted, gpus = 40, 16
	borrower := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	if err := testfleet.Parallel(submitted, 8, func(i int) error {
		_, err := borrower.Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("race-%02d", i)},
			Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 3600}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var doubles []string
	scheduled := 0
	check := func(c context.Context) (bool, error) {
		list, err := borrower.List(c, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		mu.Lock()
		defer mu.Unlock()
		var placed map[string]string
		placed, doubles = gpuPlacements(list.Items)
		scheduled = len(placed)
		return scheduled >= gpus || len(doubles) > 0, nil
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, check); err != nil {
		t.Fatalf("only %d of %d GPUs were placed", scheduled, gpus)
	}
	time.Sleep(2 * time.Second) // the two schedulers' later passes
	if _, err := check(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if len(doubles) > 0 || scheduled != gpus {
		t.Errorf("%d executions scheduled on %d GPUs; placed twice: %v", scheduled, gpus, doubles)
	}
}

// gpuPlacements maps each GPU ("host/index") of the scheduled executions
// to the execution placed on it, and says which GPUs are placed twice.
func gpuPlacements(executions []nodusv1.Execution) (map[string]string, []string) {
	placed := map[string]string{}
	var doubles []string
	for _, e := range executions {
		if e.Status.Phase != nodusv1.ExecutionScheduled {
			continue
		}
		for _, g := range e.Status.GPUIndices {
			gpu := fmt.Sprintf("%s/%d", e.Status.Host, g)
			if other, ok := placed[gpu]; ok {
				doubles = append(doubles, fmt.Sprintf("%s: %s and %s", gpu, other, e.Name))
			}
			placed[gpu] = e.Name
		}
	}
	return placed, doubles
}
