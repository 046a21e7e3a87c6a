package accesstoken

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the AccessToken storage.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("accesstokens"), Singular: nodusv1.Resource("accesstoken"),
		New:     func() runtime.Object { return &nodusv1.AccessToken{} },
		NewList: func() runtime.Object { return &nodusv1.AccessTokenList{} },
		Rules:   rules, Table: table, Fields: selectable,
	}
}
