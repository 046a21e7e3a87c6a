package allocation

import (
	"fmt"
	"math/rand/v2"
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// BenchmarkAWakeOfWaitingAllocations: 1,000 allocations of a class wait on
// a fleet of 10,000 nodes of it, every one in use. A node of the class
// changes its standing (here: its claim moves), which wakes every waiting
// allocation; each one finds no node to take and words why it waits
// (status.lastError). One op is one such wake: the index updated, then
// 1,000 looks.
func BenchmarkAWakeOfWaitingAllocations(b *testing.B) {
	const nodes, waiters = 10_000, 1_000
	c := &Controller{index: newFreeIndex(), rnd: rand.New(rand.NewPCG(1, 2))}
	fleet := make([]*nodusv1.Node, nodes)
	for i := range fleet {
		fleet[i] = readyNode(fmt.Sprintf("n%05d", i), "gpu-h100x8", 10)
		fleet[i].Status.Allocation = fmt.Sprintf("held-%05d", i)
		c.index.update(fleet[i])
	}
	waiting := make([]*nodusv1.Allocation, waiters)
	for i := range waiting {
		waiting[i] = allocationOf(fmt.Sprintf("w%04d", i), "gpu-h100x8")
	}
	const want = "every matching node is already allocated or in use"
	i := 0
	for b.Loop() {
		n := fleet[i%nodes].DeepCopy()
		n.Status.Allocation = fmt.Sprintf("moved-%d", i)
		c.index.update(n)
		i++
		for _, a := range waiting {
			if node, why := c.choose(a, nil); node != nil || why != want {
				b.Fatalf("%s: took %v, why %q", a.Name, node, why)
			}
		}
	}
}
