package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
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
	runScheduler(t, s.ServerConfig, etcd) // an old leader's, beside the server's

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

// TestALosingSchedulerKeepsTheWinnersClaims: two schedulers (an old
// leader and a new one) place the same execution on the same GPU. The
// first claims the GPU; the second finds the claim held by the execution
// and takes it as its own; the second's status write lands and the first's
// is refused (a conflict). The first then released the claims it had made,
// which the landed placement stands on, and the GPU was free for another
// execution while the first still held it.
func TestALosingSchedulerKeepsTheWinnersClaims(t *testing.T) {
	s := testserver.StartTestServer(t)
	f, etcd := oneLentHost(t, s, 1000)
	takeTheLead(t, etcd) // the only scheduler is the one below
	borrower := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	if _, err := borrower.Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: "contested"},
		Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 3600}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Each placement's write is preceded by the same write from the other
	// scheduler, which lands: this one's then meets a conflict.
	beaten := &beatenToIt{}
	cfg := rest.CopyConfig(s.ServerConfig)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { beaten.next = next; return beaten })
	runScheduler(t, cfg, etcd)

	var placed *nodusv1.Execution
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		var err error
		placed, err = borrower.Get(c, "contested", metav1.GetOptions{})
		return err == nil && placed.Status.Phase == nodusv1.ExecutionScheduled && beaten.refused.Load() > 0, err
	}); err != nil {
		t.Fatalf("the placement: %v (refused writes %d)", err, beaten.refused.Load())
	}
	time.Sleep(time.Second) // the refused write's aftermath, and a later pass
	claims, err := etcd.Get(ctx(t), scheduler.ClaimsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s%s/%d", scheduler.ClaimsPrefix, placed.Status.Host, placed.Status.GPUIndices[0])
	var held []string
	for _, kv := range claims.Kvs {
		if string(kv.Key) == want && strings.HasPrefix(string(kv.Value), "beta/contested/"+string(placed.UID)+"@") {
			held = append(held, string(kv.Key))
		}
	}
	if len(held) != 1 {
		t.Errorf("the placement on %s GPU %v stands on no claim: the claims are %v", placed.Status.Host, placed.Status.GPUIndices, claims.Kvs)
	}
}

// beatenToIt sends each Execution status write twice: the first stands
// for another scheduler's identical write, which lands; the second,
// the caller's, then conflicts.
type beatenToIt struct {
	next    http.RoundTripper
	refused atomic.Int32
}

func (b *beatenToIt) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/status") || !strings.Contains(req.URL.Path, "/executions/") {
		return b.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	other := req.Clone(req.Context())
	other.Body = io.NopCloser(bytes.NewReader(body))
	if resp, err := b.next.RoundTrip(other); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := b.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusConflict {
		b.refused.Add(1)
	}
	return resp, err
}
