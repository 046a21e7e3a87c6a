package liveness

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// forEachReach runs test once for each way a server reaches etcd
// (testfleet.EtcdReaches), with a network client for the test's own checks
// and a tracker that reaches etcd that way, on its lease service.
func forEachReach(t *testing.T, test func(t *testing.T, client *clientv3.Client, tr *Tracker)) {
	for _, reach := range testfleet.EtcdReaches {
		t.Run(reach.Name, func(t *testing.T) {
			etcd, network, err := testfleet.StartEtcd(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			client, err := reach.Client(etcd)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				client.Close()
				network.Close()
				etcd.Stop(context.Background())
			})
			var leases pb.LeaseClient
			if reach.InProcess {
				leases = etcd.InProcessLeaseClient()
			} else {
				leases = LeaseService(client)
			}
			test(t, network, New(client, leases, 30*time.Second))
		})
	}
}

// TestBeatsOverTheStreams checks that keep-alives over the shared streams
// renew the right leases: many nodes at once, a lease that is gone, and a
// stream that broke.
func TestBeatsOverTheStreams(t *testing.T) { forEachReach(t, beatsOverTheStreams) }

func beatsOverTheStreams(t *testing.T, client *clientv3.Client, tr *Tracker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const nodes = 50
	var wg sync.WaitGroup
	errs := make(chan error, nodes*4)
	for round := 0; round < 4; round++ {
		for i := 0; i < nodes; i++ {
			wg.Add(1)
			go func(node string, first bool) {
				defer wg.Done()
				revived, err := tr.Beat(ctx, node)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", node, err)
				} else if revived != first {
					errs <- fmt.Errorf("%s: revived %v on round first=%v", node, revived, first)
				}
			}(fmt.Sprintf("n-%02d", i), round == 0)
		}
		wg.Wait() // each round after the first finds every lease
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	alive, err := tr.AliveSet(ctx)
	if err != nil || len(alive) != nodes {
		t.Fatalf("alive set: %d nodes, %v", len(alive), err)
	}

	// Four rounds of beats went over the streams, not a stream each.
	for i := range tr.streams.pool {
		if tr.streams.pool[i].stream == nil {
			t.Errorf("stream %d was never opened", i)
		}
	}

	// A lease revoked behind the tracker's back: the stream answers that it
	// is gone, and the beat grants a new one.
	lease := tr.leases["n-00"].lease
	if _, err := client.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if ok, _ := tr.Alive(ctx, "n-00"); ok {
		t.Fatal("n-00 alive after its lease was revoked")
	}
	if revived, err := tr.Beat(ctx, "n-00"); err != nil || !revived {
		t.Fatalf("beat after the revoke: revived %v, %v", revived, err)
	}
	if ok, _ := tr.Alive(ctx, "n-00"); !ok {
		t.Fatal("n-00 not alive after it beat again")
	}

	// Broken streams are opened again by the next beat.
	for i := range tr.streams.pool {
		ks := &tr.streams.pool[i]
		ks.mu.Lock()
		ks.breakLocked()
		ks.mu.Unlock()
	}
	for i := 0; i < streamCount; i++ {
		if revived, err := tr.Beat(ctx, fmt.Sprintf("n-%02d", i+1)); err != nil || revived {
			t.Errorf("beat after the streams broke: revived %v, %v", revived, err)
		}
	}
	before, _ := client.TimeToLive(ctx, tr.leases["n-01"].lease)
	time.Sleep(1100 * time.Millisecond)
	if _, err := tr.Beat(ctx, "n-01"); err != nil {
		t.Fatal(err)
	}
	after, _ := client.TimeToLive(ctx, tr.leases["n-01"].lease)
	if after.TTL <= before.TTL-1 {
		t.Errorf("the beat did not renew the lease: TTL %d before, %d after", before.TTL, after.TTL)
	}
}

// TestBeatsWhenTheStreamsEndUnderThem checks that beats go on when every
// stream's context ends under it (as when etcd closes the connection): a
// keep-alive whose stream ends before its answer is retried with
// KeepAliveOnce, and the next one opens a new stream.
func TestBeatsWhenTheStreamsEndUnderThem(t *testing.T) {
	forEachReach(t, beatsWhenTheStreamsEndUnderThem)
}

func beatsWhenTheStreamsEndUnderThem(t *testing.T, _ *clientv3.Client, tr *Tracker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < streamCount; i++ {
		if _, err := tr.Beat(ctx, fmt.Sprintf("n-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 3; round++ {
		for i := range tr.streams.pool {
			ks := &tr.streams.pool[i]
			ks.mu.Lock()
			if ks.cancel != nil {
				ks.cancel()
			}
			ks.mu.Unlock()
		}
		for i := 0; i < streamCount*2; i++ {
			if revived, err := tr.Beat(ctx, fmt.Sprintf("n-%d", i%streamCount)); err != nil || revived {
				t.Fatalf("round %d: beat after the streams ended: revived %v, %v", round, revived, err)
			}
		}
	}
	// A waiter queued on a stream that breaks is told so, not left waiting.
	ks := &tr.streams.pool[0]
	answer := make(chan int64, 1)
	ks.mu.Lock()
	ks.waiters = append(ks.waiters, answer)
	ks.breakLocked()
	ks.mu.Unlock()
	if ttl := <-answer; ttl != -1 {
		t.Fatalf("a broken stream answered its waiter %d", ttl)
	}
}

// twoReplicas is two replicas' trackers on one etcd, a network client of
// it for the test's own checks, and a minute for the test.
func twoReplicas(t *testing.T) (context.Context, *clientv3.Client, *Tracker, *Tracker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		etcd.Stop(context.Background())
	})
	return ctx, client, New(client, LeaseService(client), 30*time.Second), New(client, LeaseService(client), 30*time.Second)
}

// TestReplicasKeepTheLeaseTheKeyLivesOn: two replicas share the keys. One
// remembers a lease that expired (its watch has not told it yet) while
// the other revived the node with a lease of its own; the first one's next
// beat must take that lease, not put the key on a third that only it
// renews — the agent beating the second replica would then see its node
// die a TTL later. Two replicas reviving a node at once must end on one
// lease too.
func TestReplicasKeepTheLeaseTheKeyLivesOn(t *testing.T) {
	ctx, client, a, b := twoReplicas(t)
	onOneLease := func(node string, replicas ...*Tracker) {
		t.Helper()
		resp, err := client.Get(ctx, Prefix+node)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s's key: %v %v", node, resp, err)
		}
		for i, tr := range replicas {
			tr.mu.Lock()
			lease := tr.leases[node].lease
			tr.mu.Unlock()
			if clientv3.LeaseID(resp.Kvs[0].Lease) != lease {
				t.Errorf("%s: replica %d renews lease %x; the key lives on %x", node, i, lease, resp.Kvs[0].Lease)
			}
		}
	}

	if _, err := a.Beat(ctx, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Revoke(ctx, a.leases["gpu-1"].lease); err != nil { // it expired
		t.Fatal(err)
	}
	if revived, err := b.Beat(ctx, "gpu-1"); err != nil || !revived {
		t.Fatalf("the other replica's beat: revived %v, %v", revived, err)
	}
	if revived, err := a.Beat(ctx, "gpu-1"); err != nil || revived {
		t.Fatalf("the beat on the replica that remembered the expired lease: revived %v (the node was alive), %v", revived, err)
	}
	onOneLease("gpu-1", a, b)

	// A key on no lease (written by hand, or restored from a snapshot)
	// renews nothing: the beat replaces it with one on a lease.
	if _, err := client.Put(ctx, Prefix+"gpu-2", "0"); err != nil {
		t.Fatal(err)
	}
	if revived, err := b.Beat(ctx, "gpu-2"); err != nil || !revived {
		t.Fatalf("a beat on a key without a lease: revived %v, %v", revived, err)
	}
	onOneLease("gpu-2", b)

	for i := range 20 {
		node := fmt.Sprintf("both-%d", i)
		var wg sync.WaitGroup
		for _, tr := range []*Tracker{a, b} {
			wg.Go(func() {
				if _, err := tr.Beat(ctx, node); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		onOneLease(node, a, b)
	}
}

// TestALastBeatOutlivesTheLease: the replica that renewed a node's lease
// says when it last did (the node's last beat, which is recorded when the
// lease expires instead of refreshing a stored time with beats), after the
// lease expired too; a replica that heard none of its beats says nothing.
func TestALastBeatOutlivesTheLease(t *testing.T) {
	ctx, client, a, b := twoReplicas(t)
	deaths := make(chan string, 4)
	watching, stop := context.WithCancel(ctx)
	defer stop()
	go a.WatchDeaths(watching, func(node string) { deaths <- node })

	if _, err := a.Beat(ctx, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	first := a.LastBeat("gpu-1")
	time.Sleep(50 * time.Millisecond)
	before := time.Now()
	if _, err := a.Beat(ctx, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	last := a.LastBeat("gpu-1")
	if last.Before(before) || last.After(after) || !last.After(first) {
		t.Fatalf("LastBeat after the second beat = %v, want between %v and %v (the first was %v)", last, before, after, first)
	}
	if _, err := b.Beat(ctx, "gpu-2"); err != nil {
		t.Fatal(err)
	}
	if !a.LastBeat("gpu-2").IsZero() {
		t.Errorf("replica a says it heard gpu-2 at %v; only b did", a.LastBeat("gpu-2"))
	}

	// The watch is open once it reports a probe's death.
	for probed := false; !probed; {
		if _, err := a.Beat(ctx, "probe"); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Revoke(ctx, leaseOf(a, "probe")); err != nil {
			t.Fatal(err)
		}
		select {
		case node := <-deaths:
			probed = node == "probe"
		case <-time.After(time.Second):
		case <-ctx.Done():
			t.Fatal("the watch of deaths never reported the probe's")
		}
	}
	for _, lease := range []clientv3.LeaseID{leaseOf(a, "gpu-1"), leaseOf(b, "gpu-2")} {
		if _, err := client.Revoke(ctx, lease); err != nil { // they expired
			t.Fatal(err)
		}
	}
	died := map[string]bool{}
	for !died["gpu-1"] || !died["gpu-2"] {
		select {
		case node := <-deaths:
			died[node] = true
		case <-ctx.Done():
			t.Fatalf("deaths seen: %v", died)
		}
	}
	if got := a.LastBeat("gpu-1"); !got.Equal(last) {
		t.Errorf("after its death a says gpu-1 last beat at %v, want %v", got, last)
	}
	if !a.LastBeat("gpu-2").IsZero() {
		t.Errorf("after its death a says gpu-2 beat at %v; only b heard it", a.LastBeat("gpu-2"))
	}
	// The expired lease is forgotten: the next beat revives the node.
	if revived, err := a.Beat(ctx, "gpu-1"); err != nil || !revived {
		t.Fatalf("the beat after the death: revived %v, %v", revived, err)
	}
}

// leaseOf is the lease tr renews for node, read under its lock (its watch
// of deaths writes beside the test).
func leaseOf(tr *Tracker, node string) clientv3.LeaseID {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.leases[node].lease
}
