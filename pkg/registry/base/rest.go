package base

import (
	"context"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/nodus-dev/nodus/pkg/projecthistory"
	"github.com/nodus-dev/nodus/pkg/watchfilter"
)

// REST is a kind's main resource with the short names and categories kubectl shows.
type REST struct {
	*genericregistry.Store
	Short []string
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// Watch is the store's watch, less the events from before the watcher's
// project was made (projecthistory.Floor): a member's watch from a revision
// older than its project would replay a namesake project's objects.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.Store.Watch(ctx, options)
	floor, hasFloor := projecthistory.Floor(ctx)
	if err != nil || !hasFloor {
		return w, err
	}
	return watchfilter.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Error || e.Type == watch.Bookmark {
			return e, true
		}
		return e, revisionOf(e.Object) >= floor
	}), nil
}

// revisionOf is the revision an event's object was written at, also inside
// the watch cache's wrapper that shares its serializations; 0 when it has
// none.
func revisionOf(obj runtime.Object) int64 {
	if cached, ok := obj.(runtime.CacheableObject); ok {
		obj = cached.GetObject()
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return r.Short }

// Categories puts every kind in `kubectl get nodus`.
func (r *REST) Categories() []string { return []string{"nodus"} }

// StatusREST serves only get, update and patch of a kind's status.
type StatusREST struct {
	store *genericregistry.Store
}

// NewStatusREST wraps the status store of a kind.
func NewStatusREST(store *genericregistry.Store) *StatusREST { return &StatusREST{store: store} }

var _ rest.Patcher = &StatusREST{}

func (r *StatusREST) New() runtime.Object { return r.store.New() }

func (r *StatusREST) Destroy() {
	// The main store owns the shared storage and destroys it.
}

func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status updates never create the object.
	return r.store.Update(ctx, name, PatchRefusals(ctx, objInfo), createValidation, updateValidation, false, options)
}

func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// Storage returns the REST storages of stores for an API group's storage map,
// keyed by resource and resource/status.
func (s Stores) Storage(resource string, shortNames ...string) map[string]rest.Storage {
	m := map[string]rest.Storage{resource: &REST{Store: s.Main, Short: shortNames}}
	if s.Status != nil {
		m[resource+"/status"] = NewStatusREST(s.Status)
	}
	return m
}
