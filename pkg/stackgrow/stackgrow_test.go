package stackgrow

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
)

// The frame must stay on the stack: on the heap it would cost every request
// a 32 KB allocation and grow nothing.
func TestGrowKeepsItsFrameOnTheStack(t *testing.T) {
	if n := testing.AllocsPerRun(100, Grow); n != 0 {
		t.Errorf("Grow allocates %v times per call, want 0", n)
	}
}

// parkedStacks serves n requests through Handler on goroutines of their
// own, each parked in its handler as a watch waits for its next event, and
// returns how many bytes of stack they hold between them.
func parkedStacks(t *testing.T, n int, longRunning func(*http.Request) bool) uint64 {
	t.Helper()
	release := make(chan struct{})
	var parked, done sync.WaitGroup
	h := Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		parked.Done()
		<-release
	}), longRunning)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	parked.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/apis/nodus.dev/v1/reservations?watch=true", nil))
		}()
	}
	parked.Wait()
	runtime.ReadMemStats(&after)
	close(release)
	done.Wait()
	return after.StackInuse - min(after.StackInuse, before.StackInuse)
}

// A request is grown once, early; a long-running one is not: its goroutine
// lives as long as it does, and a stack grown to 64 KB stays that size for
// a handler parked as deep as the generic chain's (the runtime halves a
// stack only when less than a quarter of it is in use). 30,000 agents'
// watches held 1.9 GB of such stacks.
func TestALongRunningRequestKeepsASmallStack(t *testing.T) {
	const n = 200
	grown := parkedStacks(t, n, func(*http.Request) bool { return false })
	if grown < n*Size {
		t.Fatalf("%d requests hold %d bytes of stack, want %d at least: they were not grown", n, grown, n*Size)
	}
	small := parkedStacks(t, n, func(*http.Request) bool { return true })
	if small > n*8<<10 {
		t.Errorf("%d long-running requests hold %d bytes of stack (%d each), want 8 KB each at most: they were grown", n, small, small/n)
	}
}
