// Package hostlending is the registry of HostLendings: an owner's view of how
// its ReservedHost is lent. Owners read them; the lend and withdraw actions
// and the scheduler write them.
package hostlending

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// A HostLending is all status, like the ReservedHost it belongs to.
var rules = base.Rules{
	Namespaced: true,
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateHostLending(obj.(*nodusv1.HostLending))
	},
	ValidateStatus: func(obj, _ runtime.Object) field.ErrorList {
		return validation.ValidateHostLendingStatus(&obj.(*nodusv1.HostLending).Status, field.NewPath("status"))
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.HostLending).Status = old.(*nodusv1.HostLending).Status },
	CopySpec: func(obj, old runtime.Object) {
		obj.(*nodusv1.HostLending).ObjectMeta.Labels = old.(*nodusv1.HostLending).Labels
	},
	ResetFields: []string{"status"},
}

var table = base.Table{Columns: []base.Column{
	base.Col("State", "string", "Lent, withdrawn or ended.", func(l *nodusv1.HostLending) interface{} { return string(l.Status.State) }),
	base.Col("Pool", "string", "Pool it is lent into.", func(l *nodusv1.HostLending) interface{} { return base.Str(l.Status.Pool) }),
	base.Col("Borrowed GPUs", "string", "GPUs borrowed now of those lent.", func(l *nodusv1.HostLending) interface{} {
		return fmtRatio(l.Status.BorrowedGPUs, l.Status.MaxGPUs)
	}),
	base.Col("Executions", "string", "Executions now of those allowed.", func(l *nodusv1.HostLending) interface{} {
		return fmtRatio(l.Status.Executions, l.Status.MaxExecutions)
	}),
}}
