// Package nodeclaim refuses, at creation, a reservation for a node that
// another live reservation visibly holds over an overlapping term. It is a
// courtesy to the operator, not the guard: the claim on the Node, written by
// optimistic concurrency, is what keeps two reservations off one node.
package nodeclaim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Getters read Nodes and Reservations from the watch cache, or from etcd when fresh.
type Getters interface {
	GetNode(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error)
	GetReservation(ctx context.Context, name string, fresh bool) (*nodusv1.Reservation, error)
}

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
	Getters Getters
}

// New returns the check for creates.
func New(g Getters) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create), Getters: g}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses a node-placed reservation whose node is held by a pending
// or active reservation whose term overlaps.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("reservations") || a.GetSubresource() != "" {
		return nil
	}
	r, ok := a.GetObject().(*nodusv1.Reservation)
	if !ok || r.Spec.Placement.Node == "" {
		return nil
	}
	// The cache decides what is allowed; a refusal is checked against etcd
	// first (a release answered a moment ago may not be in the cache yet).
	holder, err := p.holder(ctx, r, false)
	if err == nil && holder != nil {
		holder, err = p.holder(ctx, r, true)
	}
	if err != nil || holder == nil {
		return err
	}
	return apierror.New(ctx, apierror.ReasonNodeReserved, nodusv1.Resource("reservations"), r.Name,
		fmt.Sprintf("node %s is held by reservation %s (%s) until %s", r.Spec.Placement.Node, holder.Name, holder.Status.State,
			holder.Spec.EndsAt.UTC().Format("2006-01-02T15:04:05Z")), "")
}

// holder is the pending or active reservation that holds r's node over an
// overlapping term, or nil. A holder already releasing or ending is on its
// way out: the new reservation waits for the node's cleaning.
func (p *Plugin) holder(ctx context.Context, r *nodusv1.Reservation, fresh bool) (*nodusv1.Reservation, error) {
	node, err := p.Getters.GetNode(ctx, r.Spec.Placement.Node, fresh)
	if apierrors.IsNotFound(err) {
		return nil, nil // it waits, pending with NodeNotFound, for the node to be enrolled
	}
	if err != nil || node.Status.Reservation == "" || node.Status.Reservation == r.Name {
		return nil, err
	}
	holder, err := p.Getters.GetReservation(ctx, node.Status.Reservation, fresh)
	if apierrors.IsNotFound(err) {
		return nil, nil // a claim the controller is about to hand over
	}
	if err != nil {
		return nil, err
	}
	switch holder.Status.State {
	case "", nodusv1.ReservationStatePending, nodusv1.ReservationStateActive:
	default:
		return nil, nil
	}
	if !holder.Spec.StartsAt.Before(&r.Spec.EndsAt) || !r.Spec.StartsAt.Before(&holder.Spec.EndsAt) {
		return nil, nil
	}
	return holder, nil
}
