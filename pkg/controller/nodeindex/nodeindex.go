// Package nodeindex is the index of Nodes by the allocation their claim
// names, which the reservation and allocation controllers both read from
// the one shared Nodes informer.
package nodeindex

import (
	"k8s.io/client-go/tools/cache"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ByAllocation indexes nodes by status.allocation; unclaimed nodes are not indexed.
const ByAllocation = "node.allocation"

// AddByAllocation adds the index to nodes, before it starts, unless another
// controller on the same informer did.
func AddByAllocation(nodes cache.SharedIndexInformer) error {
	if _, ok := nodes.GetIndexer().GetIndexers()[ByAllocation]; ok {
		return nil
	}
	return nodes.AddIndexers(cache.Indexers{ByAllocation: func(obj interface{}) ([]string, error) {
		if n, ok := obj.(*nodusv1.Node); ok && n.Status.Allocation != "" {
			return []string{n.Status.Allocation}, nil
		}
		return nil, nil
	}})
}
