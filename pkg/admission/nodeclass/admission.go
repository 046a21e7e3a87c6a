// Package nodeclass keeps a node's resource class while the node is in use.
// An allocation or a reservation chose the node by its class; changed under
// them, the node would serve a request of another class, and be offered to
// that class again once freed while its holder still counts it as its own
// kind. Ironic refuses the change likewise (InvalidState, 409) outside the
// states a node is not deployed in.
package nodeclass

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
}

// New returns the check for node updates.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Update)}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses a change of a node's resource class while it is in use.
// It runs on the node as stored when the update is written, so a claim
// written a moment before counts.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("nodes") || a.GetSubresource() != "" {
		return nil
	}
	old, ok := a.GetOldObject().(*nodusv1.Node)
	if !ok {
		return nil
	}
	next, ok := a.GetObject().(*nodusv1.Node)
	if !ok {
		return nil
	}
	return Refusal(ctx, old, next)
}

// Refusal is the error for changing old's resource class to next's while
// old is in use, nil when the class stays or the node is free. The Ironic
// API, whose writes take no admission, asks it too.
func Refusal(ctx context.Context, old, next *nodusv1.Node) error {
	if next.Spec.ResourceClass == old.Spec.ResourceClass {
		return nil
	}
	use := InUse(old)
	if use == "" {
		return nil
	}
	return apierror.New(ctx, apierror.ReasonNodeInUse, nodusv1.Resource("nodes"), old.Name,
		fmt.Sprintf("node %s %s: its resource class stays %q until it is available again, since its holder chose it by that class",
			old.Name, use, old.Spec.ResourceClass), "")
}

// InUse says how node n is in use, "" when it is not: held by an
// allocation or a reservation, active, or being cleaned after a tenant.
func InUse(n *nodusv1.Node) string {
	var use []string
	if n.Status.Allocation != "" {
		use = append(use, "is held by allocation "+n.Status.Allocation)
	}
	if n.Status.Reservation != "" {
		use = append(use, "is held by reservation "+n.Status.Reservation)
	}
	switch n.Status.ProvisionState {
	case nodusv1.ProvisionStateCleaning:
		use = append(use, "is being cleaned")
	case nodusv1.ProvisionStateActive:
		if len(use) == 0 {
			use = append(use, "is active")
		}
	}
	return strings.Join(use, " and ")
}
