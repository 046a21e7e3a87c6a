// Package reservedhost is the registry of ReservedHosts, the customer-safe
// projection of Reservations. Customers only read them; operators and the
// server's controllers write them.
package reservedhost

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// A ReservedHost is all status: it is created whole by its controller, its
// main resource then changes only metadata, and its status subresource only status.
var rules = base.Rules{
	Namespaced: true,
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateReservedHost(obj.(*nodusv1.ReservedHost))
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.ReservedHost).Status = old.(*nodusv1.ReservedHost).Status },
	CopySpec: func(obj, old runtime.Object) {
		obj.(*nodusv1.ReservedHost).ObjectMeta.Labels = old.(*nodusv1.ReservedHost).Labels
	},
	ValidateStatus: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateReservedHostStatus(obj.(*nodusv1.ReservedHost), old.(*nodusv1.ReservedHost))
	},
	ResetFields: []string{"status"},
}

func selectable(obj runtime.Object) fields.Set {
	h := obj.(*nodusv1.ReservedHost)
	return fields.Set{"status.reservation.state": string(h.Status.Reservation.State), "status.pool": h.Status.Pool}
}

var table = base.Table{Columns: []base.Column{
	base.Col("State", "string", "Access state of the reservation.", func(h *nodusv1.ReservedHost) interface{} { return string(h.Status.Reservation.State) }),
	base.Col("Epoch", "integer", "Access epoch.", func(h *nodusv1.ReservedHost) interface{} { return h.Status.Reservation.Epoch }),
	base.Col("GPUs", "string", "Accelerators.", func(h *nodusv1.ReservedHost) interface{} { return nodusv1.GPUSummary(h.Status.Inventory.GPUs) }),
	base.Col("Pool", "string", "Capacity group.", func(h *nodusv1.ReservedHost) interface{} { return base.Str(h.Status.Pool) }),
	base.Col("Connected", "string", "Fresh heartbeat from the current agent.", func(h *nodusv1.ReservedHost) interface{} {
		if c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected); c != nil {
			return string(c.Status)
		}
		return "Unknown"
	}),
	base.Col("Ends", "string", "Time until the term ends.", func(h *nodusv1.ReservedHost) interface{} { return base.Until(h.Status.Reservation.EndsAt) }),
}}
