package project

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Finalizer holds a deleted Project until the project controller removed
// everything of it (its reservations, ReservedHosts, Executions,
// HostLendings, logs and idempotency records), so that a project created
// later under the same name inherits nothing.
const Finalizer = "nodus.dev/project"

// REST is the Project storage, whose deletion is refused while the project
// has live reservations, unless the operator asked for their retirement.
type REST struct {
	*base.REST
	Reservations *genericregistry.Store
	// Sweeps delete what an earlier project of the name left.
	Sweeps Sweeps
}

// Sweeps delete what an earlier project of a name left (package
// projectsweep): Unmade everything, while no project of the name exists;
// Made the keys that predate madeAt, the project's create revision.
type Sweeps struct {
	Unmade func(ctx context.Context, name string) error
	Made   func(ctx context.Context, name string, madeAt int64) error
}

// Storage returns the Project storage.
func Storage(projects, reservations base.Stores, sweeps Sweeps) map[string]rest.Storage {
	return map[string]rest.Storage{"projects": &REST{REST: &base.REST{Store: projects.Main, Short: []string{"proj"}}, Reservations: reservations.Main, Sweeps: sweeps}}
}

// Create deletes what an earlier project of its name left in its
// namespace, makes the project, then deletes what landed in between before
// it answers: its members, told it exists, find it empty, and nothing of
// the earlier project in the history they may read from the project's
// birth on (its resourceVersion, its key's create revision). A sweep
// before that fails fails the creation; one after is logged, and the
// project controller sweeps each project it sees once more.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	// Only a name that can be a project's: the store checks it after the
	// sweep, and "acme/e1" would sweep what project acme keeps for e1.
	if p, ok := obj.(*nodusv1.Project); ok && len(apimachineryvalidation.ValidateNamespaceName(p.Name, false)) == 0 &&
		r.Sweeps.Unmade != nil && len(options.DryRun) == 0 {
		if err := r.Sweeps.Unmade(ctx, p.Name); err != nil {
			return nil, apierrors.NewServiceUnavailable("deleting what an earlier project of the name left: " + err.Error())
		}
	}
	out, err := r.Store.Create(ctx, obj, createValidation, options)
	if err != nil || r.Sweeps.Made == nil || len(options.DryRun) > 0 {
		return out, err
	}
	p := out.(*nodusv1.Project)
	if madeAt, perr := strconv.ParseInt(p.ResourceVersion, 10, 64); perr == nil {
		if serr := r.Sweeps.Made(ctx, p.Name, madeAt); serr != nil {
			klog.ErrorS(serr, "sweeping what an earlier project of the name left", "project", p.Name)
		}
	}
	return out, nil
}

// Update makes the project through Create when a server-side apply names
// one that does not exist, so that what an earlier project of the name
// left is swept before it as for a POST (made by the store's update, its
// members could read the sweep's deletions from its history on).
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if forceAllowCreate && len(options.DryRun) == 0 {
		out, made, err := base.CreateByApply(ctx, r.Store, name, objInfo, func(obj runtime.Object) (runtime.Object, error) {
			return r.Create(ctx, obj, createValidation, base.CreateOptionsOf(options))
		})
		if made {
			return out, err == nil, err
		}
	}
	return r.REST.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// Delete checks the project's reservations, then deletes (the finalizer
// keeps the object until its contents are gone).
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	obj, err := r.Store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	p := obj.(*nodusv1.Project)
	if p.DeletionTimestamp == nil && p.Annotations[nodusv1.AnnotationRetireReservations] != "true" {
		live, err := r.liveReservations(ctx, name)
		if err != nil {
			return nil, false, err
		}
		if len(live) > 0 {
			shown := live
			if len(shown) > 10 {
				shown = append(shown[:10:10], fmt.Sprintf("and %d more", len(live)-10))
			}
			return nil, false, apierror.New(ctx, apierror.ReasonProjectHasReservations, nodusv1.Resource("projects"), name,
				fmt.Sprintf("project %s has live reservations: %s", name, strings.Join(shown, ", ")), "")
		}
	}
	return r.Store.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection goes through Delete for each project: the store's own
// would pass over the live reservations' check, and the finalizer would
// then end them all.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return base.DeleteEach(ctx, r.Store, r, deleteValidation, options, listOptions)
}

// liveReservations names the project's reservations that are not over.
func (r *REST) liveReservations(ctx context.Context, project string) ([]string, error) {
	// A consistent read: a reservation created a moment ago counts.
	list, err := r.Reservations.List(request.WithNamespace(ctx, ""), &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.project", project)})
	if err != nil {
		return nil, err
	}
	var live []string
	for _, res := range list.(*nodusv1.ReservationList).Items {
		if !lifecycle.Final(res.Status.State) {
			live = append(live, fmt.Sprintf("%s (%s)", res.Name, res.Status.State))
		}
	}
	sort.Strings(live)
	return live, nil
}
