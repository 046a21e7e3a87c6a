package embeddedetcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const testQuota = 32 << 20

// valueSize is what fill writes at a time: small beside the quota, so that
// one value deleted from a full member leaves it above freedBelow however
// the database's pages fell (with 1 MiB values, a member that took 29 of
// them was under it once one was deleted, and writes came back).
const valueSize = 256 << 10

// fill writes value under keys made by key(i) until etcd refuses one for
// its quota; it returns how many it took.
func fill(ctx context.Context, t *testing.T, client *clientv3.Client, key func(int) string) int {
	t.Helper()
	value := strings.Repeat("x", valueSize)
	for i := range 1000 {
		_, err := client.Put(ctx, key(i), value)
		if errors.Is(err, rpctypes.ErrGRPCNoSpace) || errors.Is(err, rpctypes.ErrNoSpace) {
			return i
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	t.Fatalf("1,000 writes of %d KiB and no refusal for a quota of %d bytes", valueSize>>10, testQuota)
	return 0
}

// smallMember is a member with a quota of testQuota, its in-process
// client, and a context for the test; all end with t.
func smallMember(t *testing.T) (*Server, *clientv3.Client, context.Context) {
	t.Helper()
	s, err := StartWithQuota(t.TempDir(), time.Minute, testQuota)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	client := s.InProcessClient()
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return s, client, ctx
}

// writesBackWithin runs KeepSpace's rounds after last, a few at most, until
// a small write passes: the round that compacts may read the member as
// full as before, and one of the next rounds gives writes back.
func writesBackWithin(ctx context.Context, t *testing.T, s *Server, client *clientv3.Client, last round, after string) {
	t.Helper()
	const rounds = 20
	for i := 1; ; i++ {
		var err error
		if last, err = s.makeRoom(ctx, client, last); err != nil {
			t.Fatal(err)
		}
		_, err = client.Put(ctx, "/small", "v")
		if err == nil {
			return
		}
		if i == rounds {
			t.Fatalf("a write after %s, %d rounds later: %v", after, rounds, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The versions of one key fill the database: compacting them makes room.
func TestAMemberFullOfHistoryTakesWritesAgain(t *testing.T) {
	s, client, ctx := smallMember(t)

	fill(ctx, t, client, func(int) string { return "/history" })
	if _, err := client.Put(ctx, "/small", "v"); err == nil {
		t.Fatal("a small write passed with the NOSPACE alarm raised")
	}
	writesBackWithin(ctx, t, s, client, round{}, "the history was compacted")
	if got, err := client.Get(ctx, "/history"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("the key whose history was compacted: %v %v; want its last version", got, err)
	}
}

// A round with nothing deleted since the last still gives writes back once
// the last round's compaction shows its room: etcd counts the pages a
// compaction frees at a later commit, and the round that compacted can
// read the member as full as before (one run in about 40 of the test above
// did). Until session 56 such a round returned at once, and the member
// refused writes until something was deleted.
func TestARoundAfterTheCompactionTakesWritesOnceItsRoomShows(t *testing.T) {
	s, client, ctx := smallMember(t)

	// The earlier round's compaction, its room not yet counted when that
	// round read the member.
	revision := fullOfCompactedHistory(ctx, t, s, client)
	if _, err := s.makeRoom(ctx, client, round{compacted: revision}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "/small", "v"); err != nil {
		t.Fatalf("a write after a round with nothing deleted since the compaction: %v", err)
	}
}

// A defragmentation that left the member over the line is not done again
// every round (each blocks every read and write of the member), only once
// something was deleted since.
func TestAFruitlessDefragmentationWaitsForADelete(t *testing.T) {
	s, client, ctx := smallMember(t)

	revision := fullOfCompactedHistory(ctx, t, s, client)
	last := round{compacted: revision, defragmented: true}
	next, err := s.makeRoom(ctx, client, last)
	if err != nil {
		t.Fatal(err)
	}
	if next != last {
		t.Errorf("a round with nothing deleted since a fruitless defragmentation left %+v, want %+v", next, last)
	}
	if _, err := client.Put(ctx, "/small", "v"); err == nil {
		t.Fatal("a round with nothing deleted since a fruitless defragmentation defragmented and gave writes back")
	}
	if _, err := client.Delete(ctx, "/history"); err != nil {
		t.Fatal(err)
	}
	writesBackWithin(ctx, t, s, client, last, "a delete")
}

// fullOfCompactedHistory fills a member with the versions of one key,
// compacts them as a round of KeepSpace does, waits until etcd counts the
// room that made, and returns the revision compacted to.
func fullOfCompactedHistory(ctx context.Context, t *testing.T, s *Server, client *clientv3.Client) int64 {
	t.Helper()
	fill(ctx, t, client, func(int) string { return "/history" })
	status, err := client.Status(ctx, s.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	revision := status.Header.Revision
	if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for {
		s.etcd.Server.Backend().ForceCommit()
		status, err := client.Status(ctx, s.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		if float64(status.DbSizeInUse) < freedBelow*testQuota {
			return revision
		}
		if ctx.Err() != nil {
			t.Fatalf("the compaction's room never showed: %d bytes in use", status.DbSizeInUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Keys of their own fill the database: writes stay refused until enough
// of them are deleted.
func TestAMemberFullOfLiveDataTakesWritesOnceEnoughIsDeleted(t *testing.T) {
	s, client, ctx := smallMember(t)

	key := func(i int) string { return fmt.Sprintf("/live/%d", i) }
	n := fill(ctx, t, client, key)
	// A delete passes under the alarm; one key is not enough room.
	if _, err := client.Delete(ctx, key(0)); err != nil {
		t.Fatalf("a delete under the NOSPACE alarm: %v", err)
	}
	last, err := s.makeRoom(ctx, client, round{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "/small", "v"); err == nil {
		t.Fatalf("a write passed with %d of %d values of %d KiB still live in a %d MiB quota", n-1, n, valueSize>>10, testQuota>>20)
	}
	// Values for half the quota kept, the rest deleted. (Not half of
	// them: etcd checks the quota against the size of its last commit,
	// and fast writes can take it to twice the quota before the refusal;
	// half of those values stayed over the line in 5 runs of 45 here.)
	kept := testQuota / 2 / valueSize
	for i := 1; i < n-kept; i++ {
		if _, err := client.Delete(ctx, key(i)); err != nil {
			t.Fatal(err)
		}
	}
	writesBackWithin(ctx, t, s, client, last, "all but half the quota was deleted")
	if alarms, err := client.AlarmList(ctx); err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after all but half the quota was deleted: %v %v", alarms, err)
	}
}
