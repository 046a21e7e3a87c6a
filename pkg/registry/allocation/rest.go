package allocation

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// REST deletes allocations the way Ironic does: not while their node is
// active and out of maintenance, and freeing the node when they go.
type REST struct {
	*base.REST
	Nodes *genericregistry.Store // nodes/status
}

// Storage returns the Allocation storages.
func Storage(allocations, nodes base.Stores) map[string]rest.Storage {
	return map[string]rest.Storage{
		"allocations":        &REST{REST: &base.REST{Store: allocations.Main, Short: []string{"alloc"}}, Nodes: nodes.Status},
		"allocations/status": base.NewStatusREST(allocations.Status),
	}
}

// Delete refuses to take the allocation of an active node that is not in
// maintenance, then deletes it and frees its node.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	obj, err := r.Store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	a := obj.(*nodusv1.Allocation)
	var node *nodusv1.Node
	if a.Status.Node != "" {
		n, err := r.Nodes.Get(ctx, a.Status.Node, &metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, false, err
		}
		if err == nil {
			node = n.(*nodusv1.Node)
		}
	}
	if node != nil && node.Status.ProvisionState == nodusv1.ProvisionStateActive && !node.Spec.Maintenance {
		return nil, false, apierror.New(ctx, apierror.ReasonNodeActive, nodusv1.Resource("allocations"), name,
			fmt.Sprintf("allocation %s holds node %s, which is active and not in maintenance", name, node.Name), "")
	}
	out, deleted, err := r.Store.Delete(ctx, name, deleteValidation, options)
	if err != nil || node == nil || len(options.DryRun) > 0 {
		return out, deleted, err
	}
	_, _, err = r.Nodes.Update(ctx, node.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*nodusv1.Node).DeepCopy()
			if n.Status.Allocation == name {
				n.Status.Allocation = ""
			}
			return n, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return out, deleted, err
}
