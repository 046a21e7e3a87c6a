package pool

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Pool storage.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("pools"), Singular: nodusv1.Resource("pool"),
		New:     func() runtime.Object { return &nodusv1.Pool{} },
		NewList: func() runtime.Object { return &nodusv1.PoolList{} },
		Rules:   rules, Table: table,
	}
}
