package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	client := versioned.NewForConfigOrDie(lossy)
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	factory := externalversions.NewSharedInformerFactory(client, 0)
	controller, err := allocationcontroller.New(client, factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(runCtx.Done())
	go controller.Run(runCtx, 4)

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
