package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/controller/leader"
	"github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// lostAnswers stands in for the answers of writes that a fault lost, and
// counts them.
type lostAnswers struct {
	mu   sync.Mutex
	lost int
}

// lose returns, in place of resp (read away; nil when the request was not
// passed on), the 500 a server gives a write whose etcd request timed out:
// the write may have landed.
func (l *lostAnswers) lose(req *http.Request, resp *http.Response) *http.Response {
	proto, major, minor := "HTTP/2.0", 2, 0
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		proto, major, minor = resp.Proto, resp.ProtoMajor, resp.ProtoMinor
	}
	l.mu.Lock()
	l.lost++
	l.mu.Unlock()
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}`
	return &http.Response{
		Status: "500 Internal Server Error", StatusCode: http.StatusInternalServerError,
		Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func (l *lostAnswers) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// takeTheLead makes the test lead the controllers in the server's stead,
// until it ends or calls the function returned: it campaigns, revokes the
// lease of the server's lead, and waits for the server to campaign again,
// which it does once its controllers have stopped. Given back, the lead
// goes to the server, whose controllers start again on fresh informers.
func takeTheLead(t *testing.T, etcd *clientv3.Client) (giveBack func()) {
	t.Helper()
	session, err := concurrency.NewSession(etcd, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close() })
	election := concurrency.NewElection(session, leader.ElectionPrefix)
	current, err := election.Leader(ctx(t))
	if err != nil {
		t.Fatalf("the server leads nothing: %v", err)
	}
	won := make(chan error, 1)
	go func() { won <- election.Campaign(ctx(t), "test") }()
	// The campaign's key must be queued before the server's lead ends, or
	// the server would win again.
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(c context.Context) (bool, error) {
		r, err := etcd.Get(c, leader.ElectionPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count >= 2, err
	}); err != nil {
		t.Fatalf("the test's campaign never queued: %v", err)
	}
	if _, err := etcd.Revoke(ctx(t), clientv3.LeaseID(current.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatalf("campaign: %v", err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		r, err := etcd.Get(c, leader.ElectionPrefix, clientv3.WithPrefix())
		if err != nil {
			return false, err
		}
		for _, kv := range r.Kvs {
			if clientv3.LeaseID(kv.Lease) != session.Lease() {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the server never campaigned again: %v", err)
	}
	return func() {
		if err := session.Close(); err != nil {
			t.Fatalf("giving the lead back: %v", err)
		}
	}
}

// runScheduler runs a scheduler of the test's own, writing with cfg and
// claiming GPUs in etcd: beside the server's (an old leader), or, with the
// lead taken (takeTheLead), alone. It ends with the test, or when stop is
// called.
func runScheduler(t *testing.T, cfg *rest.Config, etcd *clientv3.Client) (stop func()) {
	t.Helper()
	client := versioned.NewForConfigOrDie(cfg)
	runCtx, cancel := context.WithCancel(context.Background())
	factory := externalversions.NewSharedInformerFactory(client, 0)
	sched, err := scheduler.New(client, factory, etcd)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(runCtx.Done())
	go sched.Run(runCtx)
	stop = func() { cancel(); factory.Shutdown() }
	t.Cleanup(stop)
	return stop
}

// oneLentHost is a lending fleet of one 8-GPU host, gpu-00, lent at epoch
// 1 to project beta (up to cap GPUs), and a client of the server's etcd,
// closed with the test: for tests that run a scheduler of their own.
func oneLentHost(t *testing.T, s *testserver.Server, cap int32) (*lendingFleet, *clientv3.Client) {
	t.Helper()
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": cap}, false)
	if r := f.lend(t, f.admin, "lend", "gpu-00", `{"epoch":1}`); r.code != 200 {
		t.Fatalf("lend gpu-00: %d %s", r.code, r.body)
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	return f, etcd
}
