package node

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Node storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("nodes"), Singular: nodusv1.Resource("node"),
		New:     func() runtime.Object { return &nodusv1.Node{} },
		NewList: func() runtime.Object { return &nodusv1.NodeList{} },
		Rules:   rules, Table: table, Fields: selectable,
	}
}
