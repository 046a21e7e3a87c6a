package allocation

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Allocation storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("allocations"), Singular: nodusv1.Resource("allocation"),
		New:     func() runtime.Object { return &nodusv1.Allocation{} },
		NewList: func() runtime.Object { return &nodusv1.AllocationList{} },
		Rules:   rules, Table: table, Fields: selectable,
	}
}
