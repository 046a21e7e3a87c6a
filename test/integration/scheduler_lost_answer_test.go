package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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

// TestAPlacementWhoseAnswerWasLostKeepsItsClaims runs the scheduler with
// a client that loses the answer of the placements it writes, as when
// etcd's leader changes under a write: the scheduler is told 500, and the
// placement either landed or did not. The GPU claims of a placement that
// landed must stay in etcd: without them a scheduler whose cache has not
// seen the placement yet (this one, or an old leader) can hand the same
// GPU to another execution. Those of one that did not land must not keep
// the GPUs from being used.
func TestAPlacementWhoseAnswerWasLostKeepsItsClaims(t *testing.T) {
	t.Run("every placement landed, its answer lost", func(t *testing.T) {
		placeWithLostAnswers(t, &lostPlacementAnswers{})
	})
	t.Run("the first write of each placement lost before it landed", func(t *testing.T) {
		placeWithLostAnswers(t, &lostPlacementAnswers{firstBeforeLanding: true})
	})
}

func placeWithLostAnswers(t *testing.T, lost *lostPlacementAnswers) {
	s := testserver.StartTestServer(t)
	f, etcd := oneLentHost(t, s, 1000)
	// The only scheduler is the one below: every placement is one whose
	// answer was lost.
	takeTheLead(t, etcd)

	// More executions than the host's eight GPUs, all there before the
	// scheduler starts: its first pass places eight at once, and if their
	// claims outlived placements that did not land, no GPU would be left.
	const gpus, submitted = 8, 12
	borrower := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	for i := range submitted {
		if _, err := borrower.Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lost-%02d", i)},
			Spec: nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 3600}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	lossy := rest.CopyConfig(s.ServerConfig)
	lossy.Wrap(func(next http.RoundTripper) http.RoundTripper { lost.next = next; return lost })
	runScheduler(t, lossy, etcd)

	var placed []nodusv1.Execution
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		list, err := borrower.List(c, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		placed = placed[:0]
		for _, e := range list.Items {
			if e.Status.Phase == nodusv1.ExecutionScheduled {
				placed = append(placed, e)
			}
		}
		return len(placed) >= gpus, nil
	})
	if err != nil {
		t.Fatalf("%d of %d GPUs placed: %v", len(placed), gpus, err)
	}
	time.Sleep(2 * time.Second) // later passes, with their caches caught up

	list, err := borrower.List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := etcd.Get(ctx(t), scheduler.ClaimsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	claimedBy := map[string]string{} // host/gpu → namespace/name of the claim's execution
	for _, kv := range claims.Kvs {
		owner, _, _ := strings.Cut(string(kv.Value), "@")
		parts := strings.SplitN(owner, "/", 3)
		if len(parts) == 3 {
			claimedBy[strings.TrimPrefix(string(kv.Key), scheduler.ClaimsPrefix)] = parts[0] + "/" + parts[1]
		}
	}
	placedOn, doubles := gpuPlacements(list.Items)
	if len(doubles) > 0 {
		t.Errorf("GPUs placed twice: %v", doubles)
	}
	for gpu, execution := range placedOn {
		if owner := claimedBy[gpu]; owner != "beta/"+execution {
			t.Errorf("GPU %s is placed for %s, and its claim in etcd names %q", gpu, execution, owner)
		}
	}
	if len(placedOn) != gpus {
		t.Errorf("%d of %d GPUs placed", len(placedOn), gpus)
	}
	if n := lost.count(); n < gpus {
		t.Errorf("%d placements lost their answer, want at least %d (every one)", n, gpus)
	}
}

// lostPlacementAnswers passes requests on, and answers each Execution
// status write that succeeded with the 500 of a write whose etcd request
// timed out. With firstBeforeLanding, the first status write of each
// execution is not passed on at all, and gets the same 500.
type lostPlacementAnswers struct {
	lostAnswers
	next               http.RoundTripper
	firstBeforeLanding bool
	seen               map[string]bool // status paths whose first write came
}

func (l *lostPlacementAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	status := req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/executions/") && strings.HasSuffix(req.URL.Path, "/status")
	if status && l.firstBeforeLanding {
		l.mu.Lock()
		first := !l.seen[req.URL.Path]
		if l.seen == nil {
			l.seen = map[string]bool{}
		}
		l.seen[req.URL.Path] = true
		l.mu.Unlock()
		if first {
			if req.Body != nil {
				req.Body.Close()
			}
			return l.lose(req, nil), nil
		}
		return l.next.RoundTrip(req)
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !status {
		return resp, err
	}
	return l.lose(req, resp), nil
}
