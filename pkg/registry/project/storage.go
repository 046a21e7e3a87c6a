package project

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Project storage.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("projects"), Singular: nodusv1.Resource("project"),
		New:     func() runtime.Object { return &nodusv1.Project{} },
		NewList: func() runtime.Object { return &nodusv1.ProjectList{} },
		Rules:   rules, Table: table,
	}
}
