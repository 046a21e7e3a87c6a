// Package projectexists rejects namespaced nodus.dev objects whose namespace
// is not a Project, as Kubernetes' NamespaceLifecycle does for namespaces.
package projectexists

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// Plugin is the admission check. Projects is bound after the storages exist.
type Plugin struct {
	*admission.Handler
	Projects auth.ProjectGetter
}

// New returns the check for creates.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate rejects a create in a namespace that is no Project, or being
// deleted, and a Reservation for such a project (spec.project: a
// Reservation is cluster-scoped, its project is the ReservedHost's
// namespace). The project is read from etcd: a create the cache lets
// through while the project's deletion empties it would outlive the
// project, and a project made later under the name would inherit it.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().Group != nodusv1.GroupName || a.GetSubresource() != "" {
		return nil
	}
	name := a.GetNamespace()
	if r, ok := a.GetObject().(*nodusv1.Reservation); ok && name == "" {
		name = r.Spec.Project
		if name == "" {
			return nil // validation refuses it, saying so
		}
	}
	if name == "" {
		return nil
	}
	project, err := p.Projects.GetProject(ctx, name, true)
	if apierrors.IsNotFound(err) {
		return apierror.ProjectNotFound(ctx, name)
	}
	if err != nil {
		return err
	}
	if project.DeletionTimestamp != nil {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), errProjectDeleting)
	}
	return nil
}

var errProjectDeleting = errors.New("the project is being deleted")
