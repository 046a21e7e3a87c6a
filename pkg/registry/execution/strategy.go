// Package execution is the registry of Executions: borrowers' workloads on
// lent capacity. Their status is written by the scheduler and the agents.
package execution

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var rules = base.Rules{
	Namespaced: true,
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateExecution(obj.(*nodusv1.Execution))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateExecutionUpdate(obj.(*nodusv1.Execution), old.(*nodusv1.Execution))
	},
	PrepareForCreate: func(_ context.Context, obj runtime.Object) {
		obj.(*nodusv1.Execution).Status = nodusv1.ExecutionStatus{Phase: nodusv1.ExecutionPending}
	},
	CopyStatus:        func(obj, old runtime.Object) { obj.(*nodusv1.Execution).Status = old.(*nodusv1.Execution).Status },
	CopySpec:          func(obj, old runtime.Object) { obj.(*nodusv1.Execution).Spec = old.(*nodusv1.Execution).Spec },
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
}

func selectable(obj runtime.Object) fields.Set {
	e := obj.(*nodusv1.Execution)
	return fields.Set{"spec.pool": e.Spec.Pool, "status.phase": string(e.Status.Phase), "status.host": e.Status.Host}
}

var table = base.Table{Columns: []base.Column{
	base.Col("Phase", "string", "Where the execution is.", func(e *nodusv1.Execution) interface{} { return string(e.Status.Phase) }),
	base.Col("Pool", "string", "Pool it borrows from.", func(e *nodusv1.Execution) interface{} { return e.Spec.Pool }),
	base.Col("GPUs", "integer", "GPUs wanted.", func(e *nodusv1.Execution) interface{} { return int64(e.Spec.GPUs) }),
	base.Col("Host", "string", "Alias of where it runs.", func(e *nodusv1.Execution) interface{} { return base.Str(e.Status.Host) }),
}}
