package allocation

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// stored stands for the allocations in etcd that holds reads: object name
// to UID and Ironic name.
type stored struct {
	mu      sync.Mutex
	objects map[string][2]string
}

func (s *stored) set(object, uid, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[object] = [2]string{uid, name}
}

func (s *stored) holds(_ context.Context, key string, o owner) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.objects[o.Object]
	if !ok {
		return false, nil
	}
	if name, isName := strings.CutPrefix(key, NameClaims); isName {
		return a[1] == name, nil
	}
	return a[0] == o.UID, nil
}

func startClaims(t *testing.T) (*claims, *stored, *time.Time) {
	t.Helper()
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	s := &stored{objects: map[string][2]string{}}
	now := time.Now()
	return &claims{kv: client, now: func() time.Time { return now }, holds: s.holds}, s, &now
}

func isTaken(err error, key string) bool {
	var taken *takenError
	return errors.As(err, &taken) && taken.key == key
}

// Claims are all or nothing, one owner's at a time, and a claim whose
// allocation does not hold it stands for claimGrace, then goes stale.
func TestClaimsAreExclusive(t *testing.T) {
	c, s, now := startClaims(t)
	ctx := context.Background()
	a := owner{UID: "uid-a", Object: "web-1"}
	b := owner{UID: "uid-b", Object: "allocation-x"}
	if err := c.take(ctx, []string{uuidClaim("uid-a"), nameClaim("web-1")}, a); err != nil {
		t.Fatal(err)
	}
	s.set("web-1", "uid-a", "web-1")
	if err := c.take(ctx, []string{uuidClaim("uid-b"), nameClaim("web-1")}, b); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("a second claim of a held name: %v", err)
	}
	if _, rev, _ := c.read(ctx, uuidClaim("uid-b")); rev != 0 {
		t.Error("a refused claim left one of its keys claimed")
	}
	if err := c.take(ctx, []string{uuidClaim("uid-a")}, a); err != nil {
		t.Errorf("an owner takes its own claim again: %v", err)
	}

	// An allocation that claimed and never wrote: its claim stands for
	// claimGrace, then is anyone's.
	if err := c.take(ctx, []string{nameClaim("ghost")}, owner{UID: "uid-g", Object: "ghost"}); err != nil {
		t.Fatal(err)
	}
	if err := c.take(ctx, []string{nameClaim("ghost")}, b); !isTaken(err, nameClaim("ghost")) {
		t.Fatalf("a claim younger than claimGrace must stand: %v", err)
	}
	*now = now.Add(claimGrace + time.Second)
	if err := c.take(ctx, []string{nameClaim("ghost")}, b); err != nil {
		t.Fatalf("a stale claim is taken over: %v", err)
	}
	// A held claim stands however old it is.
	if err := c.take(ctx, []string{nameClaim("web-1")}, b); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("an old claim its allocation holds must stand: %v", err)
	}
}

// A rename releases the name left at once, but only where the allocation,
// read again, does not hold it; a delete removes the claims.
func TestClaimsReleasedByRenameAndDelete(t *testing.T) {
	c, s, _ := startClaims(t)
	ctx := context.Background()
	a := owner{UID: "uid-a", Object: "web-1"}
	b := owner{UID: "uid-b", Object: "other"}
	if err := c.take(ctx, []string{nameClaim("web-1")}, a); err != nil {
		t.Fatal(err)
	}
	s.set("web-1", "uid-a", "web-1")
	if err := c.release(ctx, []string{nameClaim("web-1")}, a, false); err != nil {
		t.Fatal(err)
	}
	if err := c.take(ctx, []string{nameClaim("web-1")}, b); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("a release must leave a name its allocation holds: %v", err)
	}
	if err := c.take(ctx, []string{nameClaim("web-2")}, a); err != nil { // the rename to web-2
		t.Fatal(err)
	}
	s.set("web-1", "uid-a", "web-2")
	if err := c.release(ctx, []string{nameClaim("web-1"), nameClaim("web-2")}, a, false); err != nil {
		t.Fatal(err)
	}
	if err := c.take(ctx, []string{nameClaim("web-1")}, b); err != nil {
		t.Fatalf("the name a rename left is free at once: %v", err)
	}
	if err := c.take(ctx, []string{nameClaim("web-2")}, b); !isTaken(err, nameClaim("web-2")) {
		t.Fatalf("the new name is held: %v", err)
	}
	// Nobody releases another's claim.
	if err := c.release(ctx, []string{nameClaim("web-1")}, a, true); err != nil {
		t.Fatal(err)
	}
	if held, _, _ := c.read(ctx, nameClaim("web-1")); held.UID != "uid-b" {
		t.Errorf("a release took another allocation's claim: %+v", held)
	}
	s.set("web-1", "", "") // deleted
	if err := c.release(ctx, []string{nameClaim("web-2")}, a, true); err != nil {
		t.Fatal(err)
	}
	if _, rev, _ := c.read(ctx, nameClaim("web-2")); rev != 0 {
		t.Error("a delete must remove its allocation's claims")
	}
}

// A create retried after its write was lost takes over the claims the
// lost write's create left on its object name; the claims of another
// object's create stand. Whichever create's write lands keeps the name.
func TestClaimsTakenOverBySameObject(t *testing.T) {
	c, s, now := startClaims(t)
	ctx := context.Background()
	lost := owner{UID: "uid-lost", Object: "web-1"}
	retry := owner{UID: "uid-retry", Object: "web-1"}
	other := owner{UID: "uid-other", Object: "web-2"}
	if err := c.take(ctx, []string{uuidClaim(lost.UID), nameClaim("web-1")}, lost); err != nil {
		t.Fatal(err)
	}
	if err := c.take(ctx, []string{uuidClaim(retry.UID), nameClaim("web-1")}, retry); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("take must leave a live claim of the same object to the caller: %v", err)
	}
	if err := c.takeOver(ctx, []string{nameClaim("web-1")}, other); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("takeOver must not take another object's live claim: %v", err)
	}
	if err := c.takeOver(ctx, []string{uuidClaim(retry.UID), nameClaim("web-1")}, retry); err != nil {
		t.Fatalf("takeOver of the same object's claim: %v", err)
	}
	if held, _, _ := c.read(ctx, nameClaim("web-1")); !held.same(retry) {
		t.Fatalf("the name's claim after the takeover: %+v", held)
	}
	// The lost write landed after all, and the retry's create failed: its
	// release leaves the name to the allocation that has it.
	s.set("web-1", "uid-lost", "web-1")
	if err := c.release(ctx, []string{uuidClaim(retry.UID), nameClaim("web-1")}, retry, true); err != nil {
		t.Fatal(err)
	}
	if _, rev, _ := c.read(ctx, nameClaim("web-1")); rev == 0 {
		t.Fatal("the retry's release removed the name of the allocation that has it")
	}
	if _, rev, _ := c.read(ctx, uuidClaim(retry.UID)); rev != 0 {
		t.Error("the retry's UUID stays claimed")
	}
	*now = now.Add(claimGrace + time.Second) // held, not merely young
	if err := c.take(ctx, []string{nameClaim("web-1")}, other); !isTaken(err, nameClaim("web-1")) {
		t.Fatalf("another allocation took the name: %v", err)
	}
}

// Many creates racing for one name: exactly one gets it.
func TestClaimsRace(t *testing.T) {
	c, _, _ := startClaims(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := owner{UID: "uid-" + string(rune('a'+i)), Object: "obj-" + string(rune('a'+i))}
			err := c.take(ctx, []string{uuidClaim(o.UID), nameClaim("contended")}, o)
			if err != nil && !isTaken(err, nameClaim("contended")) && !errors.Is(err, errClaimContended) {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d creates got one name", won)
	}
}
