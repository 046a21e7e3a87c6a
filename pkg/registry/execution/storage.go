package execution

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Execution storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("executions"), Singular: nodusv1.Resource("execution"),
		New:     func() runtime.Object { return &nodusv1.Execution{} },
		NewList: func() runtime.Object { return &nodusv1.ExecutionList{} },
		Rules:   rules, Table: table, Fields: selectable,
		Indexed: "status.host", // a lent host's agent watches those placed on it
	}
}
