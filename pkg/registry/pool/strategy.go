// Package pool is the registry of Pools.
package pool

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList { return validation.ValidatePool(obj.(*nodusv1.Pool)) },
}

var table = base.Table{Columns: []base.Column{
	base.Col("Supplier", "string", "Who owns the machines.", func(p *nodusv1.Pool) interface{} { return base.Str(p.Spec.Supplier) }),
	base.Col("Location", "string", "Where the machines are.", func(p *nodusv1.Pool) interface{} { return base.Str(p.Spec.Location) }),
}}
