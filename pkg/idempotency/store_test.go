package idempotency_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// leaderless makes a real etcd client refuse its next writes as a cluster
// electing a leader does: Delete and Revoke fail with "no leader" until
// refusals runs out (negative: for ever).
type leaderless struct {
	clientv3.KV
	clientv3.Lease
	refusals atomic.Int32
	attempts atomic.Int32 // releases tried: Deletes and Revokes
}

func (l *leaderless) refuse() bool {
	l.attempts.Add(1)
	left := l.refusals.Load()
	if left == 0 {
		return false
	}
	if left > 0 {
		l.refusals.Add(-1)
	}
	return true
}

func (l *leaderless) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	if l.refuse() {
		return nil, rpctypes.ErrNoLeader
	}
	return l.KV.Delete(ctx, key, opts...)
}

func (l *leaderless) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	if l.refuse() {
		return nil, rpctypes.ErrNoLeader
	}
	return l.Lease.Revoke(ctx, id)
}

// forEachReach runs test once for each way a server reaches etcd
// (testfleet.EtcdReaches): in process, its errors come back by another path.
func forEachReach(t *testing.T, test func(t *testing.T, reach testfleet.EtcdReach)) {
	for _, reach := range testfleet.EtcdReaches {
		t.Run(reach.Name, func(t *testing.T) { test(t, reach) })
	}
}

// stores returns a store whose etcd, reached by reach, refuses refusals
// releases first, and a store on a network client that etcd always
// answers, for the test's own checks.
func stores(t *testing.T, reach testfleet.EtcdReach, refusals int32) (*idempotency.Store, *leaderless, *idempotency.Store) {
	t.Helper()
	etcd, checks, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checks.Close(); etcd.Stop(context.Background()) })
	refusing, err := reach.Client(etcd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refusing.Close() })
	faults := &leaderless{KV: refusing.KV, Lease: refusing.Lease}
	faults.refusals.Store(refusals)
	refusing.KV, refusing.Lease = faults, faults
	return idempotency.NewStore(refusing), faults, idempotency.NewStore(checks)
}

// endInFlight ends key's in-flight record, through checks, as etcd does
// when its lease runs out (its request's replica crashed, or could not
// renew it).
func endInFlight(t *testing.T, checks *idempotency.Store, key string) {
	t.Helper()
	resp, err := checks.Client.Get(context.Background(), idempotency.Prefix+key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading the in-flight record of %s: %v", key, err)
	}
	if _, err := checks.Client.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

func begin(t *testing.T, s *idempotency.Store, key string) {
	t.Helper()
	if existing, err := s.Begin(context.Background(), key, "fingerprint"); err != nil || existing != nil {
		t.Fatalf("claiming %s: %+v, %v", key, existing, err)
	}
}

// A request whose action failed while etcd had no leader releases its key
// once etcd takes writes again, not when the in-flight record's lease ends
// a minute later: its client's retries run at once.
func TestAbandonRetriesUntilEtcdTakesTheRelease(t *testing.T) {
	forEachReach(t, func(t *testing.T, reach testfleet.EtcdReach) {
		s, faults, checks := stores(t, reach, 3)
		begin(t, s, "alice/release")

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Abandon(ctx, "alice/release"); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
		if n := faults.attempts.Load(); n != 4 {
			t.Errorf("release tried %d times, want 3 refused and 1 taken", n)
		}
		if r, err := checks.Get(ctx, "alice/release"); err != nil || r != nil {
			t.Fatalf("the released key still has a record: %+v, %v", r, err)
		}
		begin(t, checks, "alice/release") // the retry runs
	})
}

// A release that comes after the in-flight record ended by itself, and a
// retry claimed the key again, leaves the retry's record alone.
func TestALateAbandonLeavesTheNextClaim(t *testing.T) {
	forEachReach(t, func(t *testing.T, reach testfleet.EtcdReach) {
		s, faults, checks := stores(t, reach, 0)
		ctx := context.Background()
		begin(t, s, "alice/release")

		// The first record's lease ends, as it does a minute after a crash
		// cut its request; a retry on another replica claims the key.
		endInFlight(t, checks, "alice/release")
		begin(t, checks, "alice/release")

		if err := s.Abandon(ctx, "alice/release"); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
		if n := faults.attempts.Load(); n != 1 {
			t.Errorf("release tried %d times: a lease etcd no longer has is released, not retried", n)
		}
		r, err := checks.Get(ctx, "alice/release")
		if err != nil {
			t.Fatal(err)
		}
		if r == nil || !r.InFlight() {
			t.Fatalf("the late release removed the retry's claim: %+v", r)
		}
	})
}

// While etcd refuses for good, Abandon gives up when the record's lease has
// ended it anyway: a caller without a deadline is not held for ever.
func TestAbandonEndsWithTheRecordsLease(t *testing.T) {
	forEachReach(t, func(t *testing.T, reach testfleet.EtcdReach) {
		s, faults, checks := stores(t, reach, -1)
		s.InFlightTTL = 2 * time.Second
		begin(t, s, "alice/release")

		done := make(chan error, 1)
		go func() { done <- s.Abandon(context.Background(), "alice/release") }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Abandon after the lease ended: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Abandon still retrying 30 s after a 2 s lease")
		}
		if n := faults.attempts.Load(); n < 2 {
			t.Errorf("release tried %d times, want retries", n)
		}
		if err := testfleet.Eventually(context.Background(), 10*time.Second, func(ctx context.Context) (bool, error) {
			r, err := checks.Get(ctx, "alice/release")
			return r == nil, err
		}); err != nil {
			t.Fatalf("the record outlived its lease: %v", err)
		}
	})
}

// A key this process does not hold (a stored answer, a crashed replica's
// record) is deleted, as before.
func TestAbandonDeletesAKeyItDoesNotHold(t *testing.T) {
	forEachReach(t, func(t *testing.T, reach testfleet.EtcdReach) {
		s, _, checks := stores(t, reach, 0)
		ctx := context.Background()
		begin(t, checks, "alice/release")
		if err := checks.Finish(ctx, "alice/release", idempotency.Record{Fingerprint: "fingerprint", Code: 200}); err != nil {
			t.Fatal(err)
		}
		if err := s.Abandon(ctx, "alice/release"); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
		if r, err := checks.Get(ctx, "alice/release"); err != nil || r != nil {
			t.Fatalf("the answer is still kept: %+v, %v", r, err)
		}
	})
}

// An action that runs longer than the in-flight record's lease keeps its
// key: the record ended with its lease, and a retry then ran the action a
// second time beside the first.
func TestARunningRequestKeepsItsKey(t *testing.T) {
	s, _, checks := stores(t, testfleet.EtcdReaches[0], 0)
	s.InFlightTTL = 2 * time.Second
	ctx := context.Background()
	begin(t, s, "alice/release")
	time.Sleep(3 * s.InFlightTTL)
	r, err := checks.Begin(ctx, "alice/release", "fingerprint")
	if err != nil {
		t.Fatal(err)
	}
	if r == nil || !r.InFlight() {
		t.Fatalf("a retry claimed the key of a request still running: %+v", r)
	}
	if err := s.Abandon(ctx, "alice/release"); err != nil {
		t.Fatal(err)
	}
	begin(t, checks, "alice/release") // released: the retry runs
}

// A request whose in-flight record ended (its lease not renewed: etcd out
// of reach a while) and whose key another request claimed and answered
// since, leaves that answer in place when it finishes: it is the key's.
func TestALateFinishLeavesTheNextAnswer(t *testing.T) {
	s, _, checks := stores(t, testfleet.EtcdReaches[0], 0)
	ctx := context.Background()
	begin(t, s, "alice/lend")
	endInFlight(t, checks, "alice/lend")
	begin(t, checks, "alice/lend")
	if err := checks.Finish(ctx, "alice/lend", idempotency.Record{Fingerprint: "fingerprint", Code: 201}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "alice/lend", idempotency.Record{Fingerprint: "fingerprint", Code: 200}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	r, err := checks.Get(ctx, "alice/lend")
	if err != nil {
		t.Fatal(err)
	}
	if r == nil || r.Code != 201 {
		t.Fatalf("the late answer replaced the key's: %+v", r)
	}
}

// Finish stores the answer where its own record was, and where none is left.
func TestFinishStoresTheAnswer(t *testing.T) {
	s, _, checks := stores(t, testfleet.EtcdReaches[0], 0)
	ctx := context.Background()
	begin(t, s, "alice/withdraw")
	if err := s.Finish(ctx, "alice/withdraw", idempotency.Record{Fingerprint: "fingerprint", Code: 200}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "alice/lend")
	endInFlight(t, checks, "alice/lend")
	if err := s.Finish(ctx, "alice/lend", idempotency.Record{Fingerprint: "fingerprint", Code: 201}); err != nil {
		t.Fatal(err)
	}
	for key, code := range map[string]int{"alice/withdraw": 200, "alice/lend": 201} {
		if r, err := checks.Get(ctx, key); err != nil || r == nil || r.InFlight() || r.Code != code {
			t.Errorf("%s: %+v, %v; want the answer %d", key, r, err, code)
		}
	}
}

// TestADrainingReplicasRequestsAreNotTakenOver: a stopping replica closes
// its listener and finishes the requests it runs. Its peers took the
// closed port for a crash and ran a retry of such a request beside it (two
// SSH certificates for one key). Marked draining, its requests are its own
// for as long as its registration lives; a replica whose port refuses
// without that mark is gone, as before.
func TestADrainingReplicasRequestsAreNotTakenOver(t *testing.T) {
	_, _, checks := stores(t, testfleet.EtcdReaches[0], 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		replica  string
		draining bool
	}{{"draining", true}, {"crashed", false}} {
		s := idempotency.NewStore(checks.Client)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(ctx, c.replica, l.Addr().String()); err != nil {
			t.Fatal(err)
		}
		key := "alice/" + c.replica + "/ssh-certificate"
		begin(t, s, key)
		if c.draining {
			if err := s.Drain(ctx); err != nil {
				t.Fatal(err)
			}
		}
		l.Close() // the stop closed its listener
		r, err := checks.Begin(ctx, key, "fingerprint")
		if err != nil || r == nil || !r.InFlight() {
			t.Fatalf("%s: the retry found %+v, %v", c.replica, r, err)
		}
		took, err := checks.TakeOver(ctx, key, r)
		if err != nil {
			t.Fatal(err)
		}
		if took == c.draining {
			t.Errorf("%s replica: its request taken over %v, want %v", c.replica, took, !c.draining)
		}
	}
}
