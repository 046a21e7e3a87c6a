// Package node is the registry of Nodes.
package node

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList { return validation.ValidateNode(obj.(*nodusv1.Node)) },
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateNodeUpdate(obj.(*nodusv1.Node), old.(*nodusv1.Node))
	},
	PrepareForCreate: func(ctx context.Context, obj runtime.Object) {
		n := obj.(*nodusv1.Node)
		// Status comes from the agent and the controllers, never from the
		// creator: an enrollment creates a machine that owes a cleaning
		// being cleaned (withCreatedStatus).
		n.Status = nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateEnroll}
		if status, ok := ctx.Value(createdStatusKey{}).(*nodusv1.NodeStatus); ok {
			n.Status = *status.DeepCopy()
		}
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.Node).Status = old.(*nodusv1.Node).Status },
	CopySpec: func(obj, old runtime.Object) {
		n, o := obj.(*nodusv1.Node), old.(*nodusv1.Node)
		n.Spec = o.Spec
		keepClaimUIDs(&n.Status, &o.Status)
	},
	ValidateStatus: func(obj, old runtime.Object) field.ErrorList {
		before, _ := old.(*nodusv1.Node)
		return validation.ValidateNodeStatusUpdate(obj.(*nodusv1.Node), before)
	},
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
}

func selectable(obj runtime.Object) fields.Set {
	n := obj.(*nodusv1.Node)
	return fields.Set{"spec.pool": n.Spec.Pool, "spec.resourceClass": n.Spec.ResourceClass, "status.provisionState": string(n.Status.ProvisionState),
		"status.reservation": n.Status.Reservation}
}

var table = base.Table{Columns: []base.Column{
	base.Col("Pool", "string", "Capacity group.", func(n *nodusv1.Node) interface{} { return n.Spec.Pool }),
	base.Col("Class", "string", "Resource class.", func(n *nodusv1.Node) interface{} { return n.Spec.ResourceClass }),
	base.Col("State", "string", "Provision state.", func(n *nodusv1.Node) interface{} { return base.Str(string(n.Status.ProvisionState)) }),
	base.Col("Ready", "string", "Whether the agent heartbeats on time.", func(n *nodusv1.Node) interface{} {
		if c := meta.FindStatusCondition(n.Status.Conditions, nodusv1.NodeConditionReady); c != nil {
			return string(c.Status)
		}
		return "Unknown"
	}),
	base.Col("GPUs", "string", "Accelerators.", func(n *nodusv1.Node) interface{} { return nodusv1.GPUSummary(n.Status.Inventory.GPUs) }),
	base.Col("Maintenance", "boolean", "Out of scheduling.", func(n *nodusv1.Node) interface{} { return n.Spec.Maintenance }),
	base.Col("Allocation", "string", "Allocation holding the node.", func(n *nodusv1.Node) interface{} { return base.Str(n.Status.Allocation) }),
	base.Col("Reservation", "string", "The live reservation holding the node.", func(n *nodusv1.Node) interface{} { return base.Str(n.Status.Reservation) }),
}}

// keepClaimUIDs keeps the UIDs of the claims a status write leaves as they
// were but sends without their UID: a client built before the field (an
// older nodusd rewrites its node's whole status to report its inventory)
// drops it, and the write would be refused as one changing a server-owned
// field. No writer clears a claim's UID and keeps its name; a claim that
// changes is written with its own UID, or none.
func keepClaimUIDs(n, old *nodusv1.NodeStatus) {
	if n.Allocation == old.Allocation && n.AllocationUID == "" {
		n.AllocationUID = old.AllocationUID
	}
	if n.Reservation == old.Reservation && n.ReservationUID == "" {
		n.ReservationUID = old.ReservationUID
	}
}

// createdStatusKey carries the status the server itself creates a Node
// with; no request reaches it.
type createdStatusKey struct{}

// withCreatedStatus makes a Node created under ctx start with status.
func withCreatedStatus(ctx context.Context, status *nodusv1.NodeStatus) context.Context {
	return context.WithValue(ctx, createdStatusKey{}, status)
}
