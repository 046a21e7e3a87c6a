package settle

import (
	"context"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var sink []byte

// A process that keeps allocating is not released; once it stops, it is,
// once.
func TestReleasesOnlyOnceQuiet(t *testing.T) {
	q := Quiet{Window: 100 * time.Millisecond, Bytes: 1 << 20, Windows: 2}
	var busy atomic.Bool
	busy.Store(true)
	go func() {
		// About 32 MB a second, 3 MB per window, in small steps: only a
		// stall of most of two windows would look quiet.
		for busy.Load() {
			sink = make([]byte, 64<<10)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var released atomic.Int32
	done := make(chan bool)
	go func() { done <- AfterQuiet(t.Context(), q, func() { released.Add(1) }) }()

	time.Sleep(20 * q.Window)
	if n := released.Load(); n != 0 {
		t.Fatalf("released %d times while the process allocated 32 MB/s", n)
	}
	busy.Store(false)
	select {
	case ok := <-done:
		if !ok || released.Load() != 1 {
			t.Fatalf("AfterQuiet returned %v after %d releases; want true after 1", ok, released.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not released within 10 s of the process going quiet")
	}
}

// A context that ends first ends the wait without a release.
func TestEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	released := false
	if AfterQuiet(ctx, Default, func() { released = true }) || released {
		t.Fatal("released after the context ended")
	}
}

// The metric the wait reads exists in this runtime, so the wait measures
// something.
func TestReadsTheAllocationCounter(t *testing.T) {
	before := allocated()
	sink = make([]byte, 4<<20)
	if after := allocated(); after-before < 4<<20 {
		t.Fatalf("%s moved by %d bytes over a 4 MiB allocation", allocatedMetric, after-before)
	}
}

// A release right after another, with nothing allocated in between, is
// skipped; one after an allocation is not.
func TestReleaseSkipsWhatTheLastOneGaveBack(t *testing.T) {
	Release()
	before := forcedCollections(t)
	Release()
	if n := forcedCollections(t) - before; n != 0 {
		t.Fatalf("a release right after another collected %d times", n)
	}
	sink = make([]byte, 4<<20)
	Release()
	if n := forcedCollections(t) - before; n != 2 {
		t.Fatalf("a release after 4 MiB allocated collected %d times, want 2", n)
	}
}

// Two fills that settle together give the memory back once.
func TestConcurrentReleasesCollectOnce(t *testing.T) {
	sink = make([]byte, 4<<20)
	before := forcedCollections(t)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(Release)
	}
	wg.Wait()
	if n := forcedCollections(t) - before; n != 2 {
		t.Fatalf("two releases at once collected %d times, want the 2 of one release", n)
	}
}

func forcedCollections(t *testing.T) uint64 {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		t.Fatal("this runtime does not count forced collections")
	}
	return sample[0].Value.Uint64()
}
