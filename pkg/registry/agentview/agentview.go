// Package agentview bounds what a node agent's credential lists and watches
// of a kind to what its node serves now. The credential is its host's,
// which a tenant with root there may have copied (docs/security.md): what
// the server shows it outlives that tenant's access, in the present and in
// the store's history (a list at a past revision, a watch from one), unless
// the server bounds both.
package agentview

import (
	"context"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/watchfilter"
)

// REST is a kind's storage whose List and Watch show node agents the
// objects that match Shown besides what they asked for; of a list at a past
// revision, and of a watch's events, only the objects that match so now;
// an object that leaves a watch, by its key and UID alone. Anyone else's
// reads are as asked.
type REST struct {
	*base.REST
	// Shown selects the objects an agent is shown.
	Shown fields.Selector
}

// List is the kind's list, for an agent what Shown selects.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	narrowed, agent := r.narrow(ctx, options)
	obj, err := r.REST.List(ctx, narrowed)
	if err != nil || !agent || !readsHistory(options) {
		return obj, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	// Checked against the present: etcd's revision now, which the watch
	// cache reaches before it answers. The list's own revision is a past
	// one, and the cache may lag etcd by events it has not taken yet (an
	// execution that finished just before the list would still run there).
	current, err := r.Store.Storage.Storage.GetCurrentResourceVersion(ctx)
	if err != nil {
		return nil, err
	}
	now := strconv.FormatUint(current, 10)
	kept := make([]runtime.Object, 0, len(items))
	for _, item := range items {
		shown, err := r.shownNow(ctx, item, narrowed, now)
		if err != nil {
			return nil, err
		}
		if shown {
			kept = append(kept, item)
		}
	}
	if err := meta.SetList(obj, kept); err != nil {
		return nil, err
	}
	return obj, nil
}

// Watch is List's view as a watch: an object that leaves what Shown
// selects leaves an agent's watch as deleted. A watch from a past revision
// replays what was so then; an agent is shown an object only while it
// matches still, and a deleted one by its key and UID (an agent needs no
// more to let it go).
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	narrowed, agent := r.narrow(ctx, options)
	w, err := r.REST.Watch(ctx, narrowed)
	if err != nil || !agent {
		return w, err
	}
	return watchfilter.Filter(w, func(e watch.Event) (watch.Event, bool) {
		obj := e.Object
		if cached, ok := obj.(runtime.CacheableObject); ok {
			// The watch cache's wrapper, which shares an event's
			// serializations between watchers.
			obj = cached.GetObject()
		}
		switch {
		case e.Type == watch.Bookmark || e.Type == watch.Error:
			return e, true
		case e.Type == watch.Deleted:
			gone, err := r.keyOf(obj)
			if err != nil {
				return errorEvent(err), true
			}
			return watch.Event{Type: watch.Deleted, Object: gone}, true
		}
		// The cache as it is: it has taken this event before sending it,
		// and lags etcd no more than a live watch does.
		shown, err := r.shownNow(ctx, obj, narrowed, "0")
		if err != nil {
			// Neither shown nor passed over in silence: the client lists
			// again.
			return errorEvent(err), true
		}
		return e, shown
	}), nil
}

// shownNow says whether seen, as a list or watch shows it, is the object
// that matches narrowed now, as the watch cache holds it at notOlderThan or
// later.
func (r *REST) shownNow(ctx context.Context, seen runtime.Object, narrowed *metainternalversion.ListOptions, notOlderThan string) (bool, error) {
	was, err := meta.Accessor(seen)
	if err != nil {
		return false, err
	}
	obj, err := r.Store.Get(genericapirequest.WithNamespace(ctx, was.GetNamespace()), was.GetName(), &metav1.GetOptions{ResourceVersion: notOlderThan})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now, err := meta.Accessor(obj)
	if err != nil {
		return false, err
	}
	if now.GetUID() != was.GetUID() {
		return false, nil // another of its name since
	}
	label := labels.Everything()
	if narrowed.LabelSelector != nil {
		label = narrowed.LabelSelector
	}
	predicate := r.Store.PredicateFunc(label, narrowed.FieldSelector)
	return predicate.Matches(obj)
}

// keyOf is obj by its key and UID alone: its labels, annotations (kubectl's
// last-applied-configuration holds the spec), managed fields, spec and
// status are its owner's record.
func (r *REST) keyOf(obj runtime.Object) (runtime.Object, error) {
	was, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	gone := r.Store.NewFunc()
	key, err := meta.Accessor(gone)
	if err != nil {
		return nil, err
	}
	gone.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	key.SetNamespace(was.GetNamespace())
	key.SetName(was.GetName())
	key.SetUID(was.GetUID())
	key.SetResourceVersion(was.GetResourceVersion())
	return gone, nil
}

func errorEvent(err error) watch.Event {
	return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
}

// narrow narrows a node agent's list or watch to what Shown selects, on
// top of what it asked.
func (r *REST) narrow(ctx context.Context, options *metainternalversion.ListOptions) (*metainternalversion.ListOptions, bool) {
	if !isAgent(ctx) {
		return options, false
	}
	narrowed := &metainternalversion.ListOptions{}
	if options != nil {
		narrowed = options.DeepCopy()
	}
	if narrowed.FieldSelector == nil || narrowed.FieldSelector.Empty() {
		narrowed.FieldSelector = r.Shown
	} else {
		narrowed.FieldSelector = fields.AndSelectors(narrowed.FieldSelector, r.Shown)
	}
	return narrowed, true
}

// readsHistory says whether a list reads a past revision (etcd serves it
// from its history) rather than the present.
func readsHistory(options *metainternalversion.ListOptions) bool {
	if options == nil {
		return false
	}
	switch {
	case options.Continue != "" || options.ResourceVersionMatch == metav1.ResourceVersionMatchExact:
		return true
	case options.ResourceVersionMatch == "" && options.Limit > 0:
		// A limit with a resourceVersion and no match reads exactly that
		// revision, as lists did before resourceVersionMatch.
		return options.ResourceVersion != "" && options.ResourceVersion != "0"
	}
	return false
}
