package reservation

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/nodeindex"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// The indexes the controller adds to the shared informers. Each event of a
// node or an allocation concerns a few reservations; finding them by a walk
// over every reservation made each event cost O(reservations), and 10,000
// reservations activating cost O(n²): a quarter of the server's CPU in
// nodus-bench's memory scenario.
const (
	// On nodes: the reservation their claim names.
	indexReservation = "node.reservation"
	// On reservations: the nodes they are placed on or hold.
	indexNode = "reservation.node"
	// On reservations: the allocation they are placed through.
	indexAllocation = "reservation.allocation"
	// On reservations: their project. A project's every event (and the
	// informers' resync of a thousand of them) read all reservations.
	indexProject = "reservation.project"
	// On allocations: the node they hold.
	indexAllocationNode = "allocation.node"
	// On allocations and ReservedHosts: the reservation their label names.
	indexLabelReservation = "label.reservation"
)

// labelReservation indexes an object by the reservation its label names.
func labelReservation(obj interface{}) ([]string, error) {
	if m, ok := obj.(interface{ GetLabels() map[string]string }); ok {
		return distinct(m.GetLabels()[LabelReservation]), nil
	}
	return nil, nil
}

// addIndexes adds the controller's indexes to the informers, before they start.
func addIndexes(nodes, reservations, allocations, hosts cache.SharedIndexInformer) error {
	if err := hosts.AddIndexers(cache.Indexers{indexLabelReservation: labelReservation}); err != nil {
		return err
	}
	if err := nodes.AddIndexers(cache.Indexers{
		indexReservation: nodeIndexFunc(func(n *nodusv1.Node) string { return n.Status.Reservation }),
	}); err != nil {
		return err
	}
	if err := nodeindex.AddByAllocation(nodes); err != nil {
		return err
	}
	if err := reservations.AddIndexers(cache.Indexers{
		indexNode: func(obj interface{}) ([]string, error) {
			r, ok := obj.(*nodusv1.Reservation)
			if !ok {
				return nil, nil
			}
			return distinct(r.Status.Node, r.Spec.Placement.Node), nil
		},
		indexAllocation: func(obj interface{}) ([]string, error) {
			if r, ok := obj.(*nodusv1.Reservation); ok {
				return distinct(lifecycle.AllocationName(r)), nil
			}
			return nil, nil
		},
		indexProject: func(obj interface{}) ([]string, error) {
			if r, ok := obj.(*nodusv1.Reservation); ok {
				return distinct(r.Spec.Project), nil
			}
			return nil, nil
		},
	}); err != nil {
		return err
	}
	return allocations.AddIndexers(cache.Indexers{
		indexAllocationNode: func(obj interface{}) ([]string, error) {
			if a, ok := obj.(*nodusv1.Allocation); ok {
				return distinct(a.Status.Node), nil
			}
			return nil, nil
		},
		indexLabelReservation: labelReservation,
	})
}

// nodeIndexFunc indexes nodes by one of their fields; an empty field is not
// indexed.
func nodeIndexFunc(field func(*nodusv1.Node) string) cache.IndexFunc {
	return func(obj interface{}) ([]string, error) {
		if n, ok := obj.(*nodusv1.Node); ok {
			return distinct(field(n)), nil
		}
		return nil, nil
	}
}

// distinct are the non-empty values, each once; nil when there are none, so
// that an object without them costs the index nothing.
func distinct(values ...string) []string {
	var out []string
	for _, v := range values {
		if v == "" {
			continue
		}
		seen := false
		for _, o := range out {
			seen = seen || o == v
		}
		if !seen {
			out = append(out, v)
		}
	}
	return out
}

// reservationsBy are the names of the reservations whose index holds value.
func (c *Controller) reservationsBy(index, value string) []string {
	if value == "" {
		return nil
	}
	objs, err := c.reservationIndex.ByIndex(index, value)
	if err != nil {
		utilruntime.HandleError(err)
		return nil
	}
	keys := make([]string, 0, len(objs))
	for _, obj := range objs {
		keys = append(keys, objectName(obj))
	}
	return keys
}
