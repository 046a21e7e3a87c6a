package scheduler

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// Two schedulers claiming GPUs of one host: each GPU goes to one
// execution, a claim is all or nothing, and nobody releases another's.
func TestGPUClaimsAreExclusive(t *testing.T) {
	client := startEtcd(t)
	ctx := context.Background()
	a := &gpuClaims{kv: client, now: time.Now}
	b := &gpuClaims{kv: client, now: time.Now}

	if ok, _, err := a.take(ctx, "h-1", []int32{0, 1}, "beta/job-a/uid-a"); !ok || err != nil {
		t.Fatalf("the first claim: %v %v", ok, err)
	}
	if ok, _, err := b.take(ctx, "h-1", []int32{1, 2}, "beta/job-b/uid-b"); ok || err != nil {
		t.Fatalf("a claim overlapping GPU 1 was granted: %v %v", ok, err)
	}
	if ok, _, _ := b.take(ctx, "h-2", []int32{1}, "beta/job-b/uid-b"); !ok {
		t.Error("the same index of another host is another GPU")
	}
	if err := b.releaseOwned(ctx, "h-1", []int32{0, 1}, "beta/job-b/uid-b@0#0"); err != nil {
		t.Fatal(err)
	}
	claims, err := a.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, c := range claims {
		held[claimKey(c.host, c.gpu)] = c.owner
	}
	want := map[string]string{claimKey("h-1", 0): "beta/job-a/uid-a", claimKey("h-1", 1): "beta/job-a/uid-a", claimKey("h-2", 1): "beta/job-b/uid-b"}
	if len(held) != len(want) {
		t.Fatalf("claims after the refused one and a foreign release: %v (GPU 2 of h-1 must not be claimed)", held)
	}
	for k, v := range want {
		if held[k] != v {
			t.Errorf("%s is held by %q, want %q", k, held[k], v)
		}
	}
	// A release of a claim read before it changed removes nothing.
	stale := claims[0]
	if ok, _, _ := a.take(ctx, "h-3", []int32{0}, "x/y/z"); !ok {
		t.Fatal("claim h-3")
	}
	stale.revision = 1
	if err := a.release(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if after, _ := a.list(ctx); len(after) != 4 {
		t.Errorf("a release at a stale revision removed a claim: %d left", len(after))
	}
	for _, c := range claims {
		if err := a.release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _, _ := b.take(ctx, "h-1", []int32{1, 2}, "beta/job-b/uid-b"); !ok {
		t.Error("GPUs released are free to claim")
	}
}

// A claim whose answer was lost after etcd took it (a leader change, a
// timeout) is the owner's: take must find it, not leave the GPUs claimed
// by a pending execution until the claim goes stale and place it elsewhere.
func TestAClaimWhoseAnswerWasLostIsTaken(t *testing.T) {
	client := startEtcd(t)
	ctx := context.Background()
	lossy := &gpuClaims{kv: answerLost{client}, now: time.Now}

	ok, _, err := lossy.take(ctx, "h-1", []int32{0, 1}, "beta/job-a/uid-a")
	if !ok || err != nil {
		t.Fatalf("a claim that landed but whose answer was lost: taken %v, %v; want taken", ok, err)
	}
	// It is still exclusive: another owner's claim whose answer was lost
	// did not land, and is not taken.
	if ok, _, err := lossy.take(ctx, "h-1", []int32{1, 2}, "beta/job-b/uid-b"); ok {
		t.Fatalf("a claim overlapping another's was taken (%v)", err)
	}
	claims, err := lossy.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 {
		t.Fatalf("%d claims, want job-a's two: %+v", len(claims), claims)
	}
	for _, c := range claims {
		if c.host != "h-1" || c.owner != "beta/job-a/uid-a" {
			t.Errorf("claim %+v, want GPUs 0 and 1 of h-1 held by job-a", c)
		}
	}
}

// answerLost commits every transaction on etcd, then loses its answer.
type answerLost struct{ clientv3.KV }

func (a answerLost) Txn(ctx context.Context) clientv3.Txn { return lostTxn{a.KV.Txn(ctx)} }

type lostTxn struct{ clientv3.Txn }

func (t lostTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { return lostTxn{t.Txn.If(cs...)} }
func (t lostTxn) Then(ops ...clientv3.Op) clientv3.Txn { return lostTxn{t.Txn.Then(ops...)} }
func (t lostTxn) Else(ops ...clientv3.Op) clientv3.Txn { return lostTxn{t.Txn.Else(ops...)} }
func (t lostTxn) Commit() (*clientv3.TxnResponse, error) {
	if _, err := t.Txn.Commit(); err != nil {
		return nil, err
	}
	return nil, context.DeadlineExceeded
}

// startEtcd is a real etcd for the test, stopped when it ends.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	return client
}

// Two schedulers (an old leader, the new one) place one execution on the
// same GPUs: the first claims them, the second finds them its execution's
// and writes too. One status write wins; the loser's refused write must
// release nothing: the claim is what backs the winner's placement.
func TestALosingPlacementReleasesNoClaimItDidNotMake(t *testing.T) {
	client := startEtcd(t)
	ctx := context.Background()
	a := &gpuClaims{kv: client, now: time.Now}
	b := &gpuClaims{kv: client, now: time.Now}
	const owner = "beta/job-a/uid-a"
	ok, madeByA, err := a.take(ctx, "h-1", []int32{0, 1}, owner)
	if !ok || err != nil || madeByA == "" {
		t.Fatalf("the first scheduler's claim: %v %q %v", ok, madeByA, err)
	}
	ok, madeByB, err := b.take(ctx, "h-1", []int32{0, 1}, owner)
	if !ok || err != nil {
		t.Fatalf("the second scheduler's placement of the same execution: %v %v", ok, err)
	}
	if madeByB != "" {
		t.Errorf("the second scheduler made no claim, yet take says it made %q", madeByB)
	}
	// The second scheduler's status write was refused (a conflict).
	if err := b.releaseOwned(ctx, "h-1", []int32{0, 1}, madeByB); err != nil {
		t.Fatal(err)
	}
	if claims, _ := a.list(ctx); len(claims) != 2 {
		t.Fatalf("the loser's release removed the winner's claims: %d left", len(claims))
	}
	// The first scheduler's own refused write releases its own claims.
	if err := a.releaseOwned(ctx, "h-1", []int32{0, 1}, madeByA); err != nil {
		t.Fatal(err)
	}
	if claims, _ := a.list(ctx); len(claims) != 0 {
		t.Errorf("a refused write left its own claims: %+v", claims)
	}
}
