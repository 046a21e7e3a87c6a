package reservedhost

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the ReservedHost storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("reservedhosts"), Singular: nodusv1.Resource("reservedhost"),
		New:     func() runtime.Object { return &nodusv1.ReservedHost{} },
		NewList: func() runtime.Object { return &nodusv1.ReservedHostList{} },
		Rules:   rules, Table: table, Fields: selectable,
	}
}
