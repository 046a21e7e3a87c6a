package node

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// CleanREST serves POST nodes/{name}/clean: an operator asks for the node's
// handover cleaning again, typically after fixing what made it fail. The
// node is cleaning until its current agent reports the new request done; a
// node that a reservation holds is refused, its tenant still has access.
type CleanREST struct {
	Nodes *genericregistry.Store // nodes/status
	Now   func() time.Time
}

var (
	_ rest.NamedCreater    = &CleanREST{}
	_ rest.StorageMetadata = &CleanREST{}
)

func (c *CleanREST) New() runtime.Object               { return &nodusv1.NodeCleanRequest{} }
func (c *CleanREST) Destroy()                          {}
func (c *CleanREST) ProducesMIMETypes(string) []string { return nil }
func (c *CleanREST) ProducesObject(string) interface{} { return nodusv1.Node{} }

// Create asks for the new cleaning.
func (c *CleanREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if _, ok := obj.(*nodusv1.NodeCleanRequest); !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a NodeCleanRequest, got %T", obj))
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	updated, _, err := c.Nodes.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			next, blocked := lifecycle.Reclean(old.(*nodusv1.Node), now())
			if blocked != nil {
				// The reason's own fix is for a reservation placed here.
				return nil, apierror.New(ctx, blocked.Reason, nodusv1.Resource("nodes"), name, blocked.Message,
					fmt.Sprintf("Nothing to do: node %s is cleaned by itself when its reservation's access ends (release it, or wait for its term's end; `nodus nodes get %s` shows status.reservation). Ask for a cleaning again only of a node no reservation holds.", name, name))
			}
			return next, nil
		}), nil, nil, false, &metav1.UpdateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager})
	return updated, err
}
