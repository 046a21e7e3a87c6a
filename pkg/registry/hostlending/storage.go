package hostlending

import (
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the HostLending storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("hostlendings"), Singular: nodusv1.Resource("hostlending"),
		New:     func() runtime.Object { return &nodusv1.HostLending{} },
		NewList: func() runtime.Object { return &nodusv1.HostLendingList{} },
		Rules:   rules, Table: table,
	}
}

func fmtRatio(n, of int32) string {
	return strconv.Itoa(int(n)) + "/" + strconv.Itoa(int(of))
}
