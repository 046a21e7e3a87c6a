// Package lendingpolicy admits an Execution only into a pool whose lending
// is open to the execution's project.
package lendingpolicy

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// PoolGetter reads a Pool.
type PoolGetter interface {
	GetPool(ctx context.Context, name string) (*nodusv1.Pool, error)
}

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
	Pools PoolGetter
}

// New returns the check for creates.
func New(pools PoolGetter) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create), Pools: pools}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses executions in pools the project may not borrow from.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("executions") || a.GetSubresource() != "" {
		return nil
	}
	e, ok := a.GetObject().(*nodusv1.Execution)
	if !ok {
		return nil
	}
	// A pool that does not exist, does not lend, or lends to others is
	// refused in the same words: pools are the operator's, and a project
	// learns of one only that it may borrow from it.
	notOpen := fmt.Sprintf("project %q may not borrow from pool %q: there is no such pool open to it", a.GetNamespace(), e.Spec.Pool)
	pool, err := p.Pools.GetPool(ctx, e.Spec.Pool)
	if apierrors.IsNotFound(err) {
		return refuse(ctx, a, notOpen)
	}
	if err != nil {
		return err
	}
	if l := pool.Spec.Lending; l == nil || !l.Open {
		return refuse(ctx, a, notOpen)
	}
	maxGPUs, ok := lending.BorrowerCap(pool, a.GetNamespace())
	if !ok {
		return refuse(ctx, a, notOpen)
	}
	if e.Spec.GPUs > maxGPUs {
		return refuse(ctx, a, fmt.Sprintf("project %q may borrow at most %d GPUs at once in pool %q; this execution wants %d", a.GetNamespace(), maxGPUs, e.Spec.Pool, e.Spec.GPUs))
	}
	return nil
}

func refuse(ctx context.Context, a admission.Attributes, msg string) error {
	return apierror.New(ctx, apierror.ReasonBorrowingNotAllowed, a.GetResource().GroupResource(), a.GetName(), msg, "")
}
