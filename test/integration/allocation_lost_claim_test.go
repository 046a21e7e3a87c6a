package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	allocationcontroller "github.com/nodus-dev/nodus/pkg/controller/allocation"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestANodeClaimWhoseAnswerWasLostIsKept runs the allocation controller
// with a client that loses the answer of every node claim it writes: the
// node's status.allocation lands, and the controller is told 500, as when
// etcd's leader changes under the write. Its watch lags, so its cache
// does not show the claim when the allocation is retried. Each allocation
// must end on the node its claim landed on, and no other node may be left
// naming it: a stray claim keeps a node out of every allocation for as
// long as its allocation lives.
func TestANodeClaimWhoseAnswerWasLostIsKept(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	var nodes []string
	for i := range 12 {
		nodes = append(nodes, fmt.Sprintf("lost-claim-%02d", i))
	}
	readyNodes(t, f, nodes...)
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	takeTheLead(t, etcd)

	// The controller writes claims, as the server's own does.
	lossy := rest.CopyConfig(s.ServerConfig)
	lost := &lostClaimAnswers{watchLag: 300 * time.Millisecond}
	lossy.Wrap(func(next http.RoundTripper) http.RoundTripper { lost.next = next; return lost })
	runAllocationController(t, lossy, 4)

	const allocations = 4
	for i := range allocations {
		if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lost-%d", i)},
			Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := testfleet.Count(ctx(t), 30*time.Second, allocations, testfleet.ActiveAllocations, s.Client); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // retries still queued, if any

	list, err := s.Client.NodusV1().Allocations().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]string{}
	for _, a := range list.Items {
		nodeOf[a.Name] = a.Status.Node
	}
	for _, name := range nodes {
		n, err := s.Client.NodusV1().Nodes().Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := n.Status.Allocation; a != "" && nodeOf[a] != name {
			t.Errorf("node %s names allocation %s, which holds node %q", name, a, nodeOf[a])
		}
	}
	if n := lost.count(); n < allocations {
		t.Errorf("%d node claims lost their answer, want at least %d (every one)", n, allocations)
	}
}

// lostClaimAnswers passes requests on; it answers each node status write
// that succeeded with the 500 of a write whose etcd request timed out, and
// holds each read of a watch back by watchLag.
type lostClaimAnswers struct {
	lostAnswers
	next     http.RoundTripper
	watchLag time.Duration
}

func (l *lostClaimAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if req.URL.Query().Get("watch") == "true" {
		resp.Body = &laggingBody{ReadCloser: resp.Body, lag: l.watchLag}
		return resp, nil
	}
	if resp.StatusCode != http.StatusOK || req.Method != http.MethodPut ||
		!strings.Contains(req.URL.Path, "/nodes/") || !strings.HasSuffix(req.URL.Path, "/status") {
		return resp, nil
	}
	return l.lose(req, resp), nil
}

// laggingBody delivers a watch's events late.
type laggingBody struct {
	io.ReadCloser
	lag time.Duration
}

func (b *laggingBody) Read(p []byte) (int, error) {
	time.Sleep(b.lag)
	return b.ReadCloser.Read(p)
}

// TestAClaimConflictFailsNoNamedAllocation: an allocation that names its
// node (a backfill, or candidate nodes) tried the node, met a conflict
// (any write to the node between the controller's cache and its claim: a
// heartbeat that was kept, an operator's label) and, the one node it may
// have being "tried", failed for good: "node … does not exist". A conflict
// is a reason to look again, not a verdict.
func TestAClaimConflictFailsNoNamedAllocation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "named-0", "candidate-0")
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	takeTheLead(t, etcd)

	// Each node's first claim meets a write that lands just before it.
	racing := rest.CopyConfig(s.ServerConfig)
	race := &writeBeforeClaim{touch: func(node string) error {
		_, err := s.Client.NodusV1().Nodes().Patch(context.Background(), node, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		return err
	}, done: map[string]bool{}}
	racing.Wrap(func(next http.RoundTripper) http.RoundTripper { race.next = next; return race })
	runAllocationController(t, racing, 2)

	for name, spec := range map[string]nodusv1.AllocationSpec{
		"backfill":  {ResourceClass: "gpu-h100x8", Node: "named-0"},
		"candidate": {ResourceClass: "gpu-h100x8", CandidateNodes: []string{"candidate-0"}},
	} {
		if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, node := range map[string]string{"backfill": "named-0", "candidate": "candidate-0"} {
		var a *nodusv1.Allocation
		if err := testfleet.Eventually(ctx(t), 20*time.Second, func(cx context.Context) (bool, error) {
			var err error
			a, err = s.Client.NodusV1().Allocations().Get(cx, name, metav1.GetOptions{})
			return err == nil && a.Status.State != nodusv1.AllocationStateAllocating, err
		}); err != nil {
			t.Fatalf("allocation %s never left allocating: %v", name, err)
		}
		if a.Status.State != nodusv1.AllocationStateActive || a.Status.Node != node {
			t.Errorf("allocation %s after a conflict on its node: %s on %q (%s), want active on %s", name, a.Status.State, a.Status.Node, a.Status.LastError, node)
		}
	}
	if race.count() < 2 {
		t.Errorf("%d claims met a write first, want both", race.count())
	}
}

// writeBeforeClaim passes requests on; before the first status write of
// each node it writes the node itself, so that the claim conflicts.
type writeBeforeClaim struct {
	next  http.RoundTripper
	touch func(node string) error
	mu    sync.Mutex
	done  map[string]bool
}

func (w *writeBeforeClaim) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/status") && strings.Contains(req.URL.Path, "/nodes/") {
		node := path.Base(path.Dir(req.URL.Path))
		w.mu.Lock()
		first := !w.done[node]
		w.done[node] = true
		w.mu.Unlock()
		if first {
			if err := w.touch(node); err != nil {
				return nil, err
			}
		}
	}
	return w.next.RoundTrip(req)
}

func (w *writeBeforeClaim) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

// runAllocationController runs an allocation controller of the test's,
// writing through cfg, until the test ends.
func runAllocationController(t *testing.T, cfg *rest.Config, workers int) {
	t.Helper()
	client := versioned.NewForConfigOrDie(cfg)
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	factory := externalversions.NewSharedInformerFactory(client, 0)
	controller, err := allocationcontroller.New(client, factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(runCtx.Done())
	go controller.Run(runCtx, workers)
}
