package execution

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/watchfilter"
)

// List shows a node agent only the executions on its host that have not
// finished (agentView); of a list at a past revision, only those that run
// there still (runsNow).
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	view, agent := agentView(ctx, options)
	obj, err := r.REST.List(ctx, view)
	if err != nil || !agent || !readsHistory(options) {
		return obj, err
	}
	list := obj.(*nodusv1.ExecutionList)
	kept := make([]nodusv1.Execution, 0, len(list.Items))
	for i := range list.Items {
		// As of the list's revision or later: the cache may be behind it.
		runs, err := r.runsNow(ctx, &list.Items[i], list.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if runs {
			kept = append(kept, list.Items[i])
		}
	}
	list.Items = kept
	return list, nil
}

// Watch is List's view as a watch: an execution that finishes leaves an
// agent's watch as deleted. A watch from a past revision replays what ran
// then: an agent is shown an execution only while it runs on the host
// still (runsNow), and a deleted one without its spec (it needs the UID
// alone, to stop it).
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	view, agent := agentView(ctx, options)
	w, err := r.REST.Watch(ctx, view)
	if err != nil || !agent {
		return w, err
	}
	return watchfilter.Filter(w, func(e watch.Event) (watch.Event, bool) {
		x, ok := executionOf(e.Object)
		switch {
		case !ok || e.Type == watch.Bookmark || e.Type == watch.Error:
			return e, true
		case e.Type == watch.Deleted:
			// Its key and UID only: its labels, annotations (kubectl's
			// last-applied-configuration holds the spec), managed fields
			// and status are the borrower's record.
			gone := &nodusv1.Execution{TypeMeta: x.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: x.Namespace, Name: x.Name,
				UID: x.UID, ResourceVersion: x.ResourceVersion}}
			return watch.Event{Type: watch.Deleted, Object: gone}, true
		}
		runs, err := r.runsNow(ctx, x, "0")
		if err != nil {
			// Neither shown nor passed over in silence: the client lists
			// again.
			return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}, true
		}
		return e, runs
	}), nil
}

// runsNow says whether x, as an agent's list or watch shows it, is the
// execution that is on its host and unfinished now, as the watch cache
// holds it at notOlderThan or later: the cache has taken every event a
// watcher is sent before it sends it. What an agent reads is bounded to what its host runs now: a
// credential a tenant with root copied reads no earlier borrower's
// command and environment from the store's history.
func (r *REST) runsNow(ctx context.Context, x *nodusv1.Execution, notOlderThan string) (bool, error) {
	obj, err := r.REST.Store.Get(genericapirequest.WithNamespace(ctx, x.Namespace), x.Name, &metav1.GetOptions{ResourceVersion: notOlderThan})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now := obj.(*nodusv1.Execution)
	return now.UID == x.UID && now.Status.Host == x.Status.Host && now.Status.Host != "" && !now.Status.Phase.Finished(), nil
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

// executionOf is the execution an event carries, also inside the watch
// cache's wrapper that shares its serializations between watchers.
func executionOf(obj runtime.Object) (*nodusv1.Execution, bool) {
	if cached, ok := obj.(runtime.CacheableObject); ok {
		obj = cached.GetObject()
	}
	x, ok := obj.(*nodusv1.Execution)
	return x, ok
}

// finalPhases are the phases in which an execution has ended
// (ExecutionPhase.Finished).
var finalPhases = []nodusv1.ExecutionPhase{nodusv1.ExecutionSucceeded, nodusv1.ExecutionFailed, nodusv1.ExecutionDrained, nodusv1.ExecutionCancelled}

// unfinished selects the executions in a phase that has not ended.
var unfinished = func() fields.Selector {
	var terms []fields.Selector
	for _, p := range finalPhases {
		terms = append(terms, fields.OneTermNotEqualSelector("status.phase", string(p)))
	}
	return fields.AndSelectors(terms...)
}()

// agentView narrows a node agent's list or watch to the executions that
// have not finished: those are what it runs and reports. A finished one is
// the borrower's record, command and environment included, kept until the
// borrower deletes it; an agent's credential is its host's, which a tenant
// with root there may have copied (docs/security.md), and would read every
// earlier borrower's executions on the host.
func agentView(ctx context.Context, options *metainternalversion.ListOptions) (*metainternalversion.ListOptions, bool) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return options, false
	}
	if _, _, agent := auth.NodeOf(u); !agent {
		return options, false
	}
	narrowed := &metainternalversion.ListOptions{}
	if options != nil {
		narrowed = options.DeepCopy()
	}
	if narrowed.FieldSelector == nil || narrowed.FieldSelector.Empty() {
		narrowed.FieldSelector = unfinished
	} else {
		narrowed.FieldSelector = fields.AndSelectors(narrowed.FieldSelector, unfinished)
	}
	return narrowed, true
}
