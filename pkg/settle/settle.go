// Package settle gives back to the system the memory a start-up left free,
// once the process has gone quiet.
//
// Filling the watch caches and the informers is a nodus-server's peak: the
// collector then finds the fill's transient data live, sets its next target
// at twice that, and the runtime keeps what the heap grew to. An idle
// server held that peak until the runtime's periodic collection, and even
// then kept up to a tenth above its new target (docs/performance.md, "The
// start-up's free memory given back"). Under load nothing here matters:
// collections run all the time, paced by GOGC.
package settle

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

const allocatedMetric = "/gc/heap/allocs:bytes"

// Quiet is when a process counts as settled: it allocated less than Bytes
// in each of Windows consecutive windows of Window.
type Quiet struct {
	Window  time.Duration
	Bytes   uint64
	Windows int
}

// Default is a fraction of what a fill allocates (a 10,000-reservation
// start-up allocates tens of MB a second until its controllers have been
// through everything once) and well above what an idle server does
// (well under 1 MB a second).
var Default = Quiet{Window: 500 * time.Millisecond, Bytes: 1 << 20, Windows: 2}

// releases serializes Release, and holds allocated() after the last one (0
// before one).
var releases struct {
	sync.Mutex
	allocatedAfter uint64
}

// Release collects twice and returns the free memory to the system. One
// collection leaves what sync.Pool keeps as its victim cache and what died
// while it marked; the second frees them (9 MB more given back at 10,000
// reserved nodes, docs/performance.md).
//
// A leader's two fills (its revocation and its controllers' informers)
// settle at the same moment; the second release would find less than a
// window's worth allocated since the first, nothing new to give back, and
// is skipped.
func Release() {
	releases.Lock()
	defer releases.Unlock()
	if last := releases.allocatedAfter; last != 0 && allocated()-last < Default.Bytes {
		return
	}
	runtime.GC()
	debug.FreeOSMemory()
	releases.allocatedAfter = allocated()
}

// AfterQuiet waits until the process is quiet, then calls release once and
// returns true. It returns false without calling it when ctx ends first.
func AfterQuiet(ctx context.Context, q Quiet, release func()) bool {
	ticker := time.NewTicker(q.Window)
	defer ticker.Stop()
	last, quiet := allocated(), 0
	for quiet < q.Windows {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
		now := allocated()
		if now-last < q.Bytes {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	release()
	return true
}

// allocated is how many bytes the heap has handed out since the process
// started (freed or not).
func allocated() uint64 {
	sample := []metrics.Sample{{Name: allocatedMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		// Unknown to this runtime: every window looks quiet, and the
		// release comes after the first ones.
		return 0
	}
	return sample[0].Value.Uint64()
}
