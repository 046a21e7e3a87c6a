package ironic

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// BenchmarkTheNameHintOfAFleet measures what namesByUID holds once /v1
// read a node by UUID on a fleet of 10,000: the map of UID to name, whose
// strings are the listed objects' own (shared with the watch cache's
// copies), so only the map is its own memory. Reported: the heap the
// map keeps after a collection, in bytes per node and in all; the time
// is a learn's (one per list a lookup makes on a miss), the collections
// around it left out.
func BenchmarkTheNameHintOfAFleet(b *testing.B) {
	const fleet = 10000
	uids, names := make([]string, fleet), make([]string, fleet)
	for i := range fleet {
		uids[i], names[i] = string(uuid.NewUUID()), fmt.Sprintf("gpu-node-%05d", i)
	}
	uidName := func(i int) (string, string) { return uids[i], names[i] }
	var held uint64
	for b.Loop() {
		var before, after runtime.MemStats
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		var hint namesByUID
		hint.learn(fleet, uidName)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.StartTimer()
		held = after.HeapAlloc - before.HeapAlloc
		if _, ok := hint.name(uids[fleet-1]); !ok {
			b.Fatal("the hint forgot a node")
		}
	}
	b.ReportMetric(float64(held)/fleet, "B/node")
	b.ReportMetric(float64(held)/(1<<20), "MiB/fleet")
}
