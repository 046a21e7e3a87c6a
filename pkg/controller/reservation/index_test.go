package reservation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/nodeindex"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/fake"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// The indexed lookups must find exactly the reservations a walk over all of
// them finds: a missed key is a reservation that never hears of its node.
func TestIndexedKeysMatchAWalkOverEveryReservation(t *testing.T) {
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		factory := externalversions.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
		c, err := New(fake.NewSimpleClientset(), factory)
		if err != nil {
			t.Fatal(err)
		}
		v1 := factory.Nodus().V1()
		pick := func(prefix string, n int) string {
			if rnd.IntN(4) == 0 {
				return ""
			}
			return fmt.Sprintf("%s%d", prefix, rnd.IntN(n))
		}
		var nodes []*nodusv1.Node
		for i := range 30 {
			n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("node", i)},
				Status: nodusv1.NodeStatus{Reservation: pick("r", 40), Allocation: pick("reservation-r", 40)}}
			nodes = append(nodes, n)
			mustAdd(t, v1.Nodes().Informer().GetIndexer(), n)
		}
		var reservations []*nodusv1.Reservation
		for i := range 40 {
			r := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("r", i)}}
			switch rnd.IntN(3) {
			case 0:
				r.Spec.Placement.Node = pick("node", 30)
			case 1:
				r.Spec.Placement.Allocation = pick("a", 10)
			default:
				r.Spec.Placement.ResourceClass = "gpu"
			}
			r.Status.Node = pick("node", 30)
			reservations = append(reservations, r)
			mustAdd(t, v1.Reservations().Informer().GetIndexer(), r)
		}
		var allocations []*nodusv1.Allocation
		for i := range 10 {
			allocations = append(allocations, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("a", i)}})
		}
		for i := range 40 {
			allocations = append(allocations, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("reservation-r", i)}})
		}
		for _, a := range allocations {
			a.Status.Node = pick("node", 30)
			mustAdd(t, v1.Allocations().Informer().GetIndexer(), a)
		}
		allocationNode := map[string]string{}
		for _, a := range allocations {
			allocationNode[a.Name] = a.Status.Node
		}

		for _, n := range nodes {
			var want []string
			for _, r := range reservations {
				if r.Status.Node == n.Name || r.Spec.Placement.Node == n.Name ||
					(lifecycle.AllocationName(r) != "" && allocationNode[lifecycle.AllocationName(r)] == n.Name) {
					want = append(want, r.Name)
				}
			}
			if n.Status.Reservation != "" {
				want = append(want, n.Status.Reservation)
			}
			if got := c.nodeKeys(n); !sameSet(got, want) {
				t.Fatalf("seed %d: node %s concerns %v, the index found %v", seed, n.Name, sorted(want), sorted(got))
			}
		}
		for _, a := range allocations {
			var want []string
			for _, r := range reservations {
				if lifecycle.AllocationName(r) == a.Name {
					want = append(want, r.Name)
				}
			}
			if got := c.reservationsBy(indexAllocation, a.Name); !sameSet(got, want) {
				t.Fatalf("seed %d: allocation %s concerns %v, the index found %v", seed, a.Name, sorted(want), sorted(got))
			}
			var holders []string
			for _, n := range nodes {
				if n.Status.Allocation == a.Name {
					holders = append(holders, n.Name)
				}
			}
			objs, err := c.nodeIndex.ByIndex(nodeindex.ByAllocation, a.Name)
			if err != nil || len(objs) != len(holders) {
				t.Fatalf("seed %d: allocation %s is recorded by nodes %v, the index found %d (%v)", seed, a.Name, holders, len(objs), err)
			}
		}
	}
}

func mustAdd(t *testing.T, indexer interface{ Add(interface{}) error }, obj interface{}) {
	t.Helper()
	if err := indexer.Add(obj); err != nil {
		t.Fatal(err)
	}
}

func sorted(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }
