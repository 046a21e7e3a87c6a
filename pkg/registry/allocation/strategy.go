// Package allocation is the registry of Allocations.
package allocation

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateNewAllocation(obj.(*nodusv1.Allocation))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateAllocationUpdate(obj.(*nodusv1.Allocation), old.(*nodusv1.Allocation))
	},
	PrepareForCreate: func(ctx context.Context, obj runtime.Object) {
		a := obj.(*nodusv1.Allocation)
		a.Status = nodusv1.AllocationStatus{State: nodusv1.AllocationStateAllocating}
		// The UUID REST.Create claimed (an Ironic client's, or a new one).
		if uid, ok := uidFrom(ctx); ok {
			a.UID = types.UID(uid)
		}
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.Allocation).Status = old.(*nodusv1.Allocation).Status },
	CopySpec:   func(obj, old runtime.Object) { obj.(*nodusv1.Allocation).Spec = old.(*nodusv1.Allocation).Spec },
	ValidateStatus: func(obj, _ runtime.Object) field.ErrorList {
		return validation.ValidateAllocationStatus(obj.(*nodusv1.Allocation))
	},
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
}

func selectable(obj runtime.Object) fields.Set {
	a := obj.(*nodusv1.Allocation)
	return fields.Set{"status.state": string(a.Status.State), "status.node": a.Status.Node}
}

var table = base.Table{Columns: []base.Column{
	base.Col("Ironic Name", "string", "The allocation's name in the Ironic API (spec.ironicName).", func(a *nodusv1.Allocation) interface{} { return base.Str(a.Spec.IronicName) }),
	base.Col("State", "string", "allocating, active or error.", func(a *nodusv1.Allocation) interface{} { return base.Str(string(a.Status.State)) }),
	base.Col("Node", "string", "Claimed node.", func(a *nodusv1.Allocation) interface{} { return base.Str(a.Status.Node) }),
	base.Col("Class", "string", "Requested resource class.", func(a *nodusv1.Allocation) interface{} { return base.Str(a.Spec.ResourceClass) }),
	base.Col("Error", "string", "Why no node was claimed.", func(a *nodusv1.Allocation) interface{} { return base.Str(a.Status.LastError) }),
}}
