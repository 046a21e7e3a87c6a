// Package reservation is the registry of Reservations.
package reservation

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
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateNewReservation(obj.(*nodusv1.Reservation))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateReservationUpdate(obj.(*nodusv1.Reservation), old.(*nodusv1.Reservation))
	},
	PrepareForCreate: func(_ context.Context, obj runtime.Object) {
		obj.(*nodusv1.Reservation).Status = nodusv1.ReservationStatus{State: nodusv1.ReservationStatePending}
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.Reservation).Status = old.(*nodusv1.Reservation).Status },
	CopySpec:   func(obj, old runtime.Object) { obj.(*nodusv1.Reservation).Spec = old.(*nodusv1.Reservation).Spec },
	ValidateStatus: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateReservationStatus(obj.(*nodusv1.Reservation), old.(*nodusv1.Reservation))
	},
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
}

func selectable(obj runtime.Object) fields.Set {
	r := obj.(*nodusv1.Reservation)
	return fields.Set{"spec.project": r.Spec.Project, "status.state": string(r.Status.State), "status.node": r.Status.Node}
}

var table = base.Table{Columns: []base.Column{
	base.Col("Project", "string", "Customer project.", func(r *nodusv1.Reservation) interface{} { return r.Spec.Project }),
	base.Col("State", "string", "Access state.", func(r *nodusv1.Reservation) interface{} { return base.Str(string(r.Status.State)) }),
	base.Col("Epoch", "integer", "Access epoch.", func(r *nodusv1.Reservation) interface{} { return r.Status.Epoch }),
	base.Col("Node", "string", "Reserved server.", func(r *nodusv1.Reservation) interface{} { return base.Str(r.Status.Node) }),
	base.Col("Ends", "string", "Time until the term ends.", func(r *nodusv1.Reservation) interface{} { return base.Until(r.Spec.EndsAt) }),
}}
