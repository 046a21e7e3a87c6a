package agentview

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Present is a kind's storage whose List and Watch show a node agent its
// objects as they are now, never as they were: a list at a past revision,
// and a watch from a revision older than an object it would show, are
// answered Gone (410), and the client lists again (client-go's reflectors
// do so by themselves). Its own Node, as it was, names the tenants before
// the one on the host now (their claims, the cleanings asked after them).
// Anyone else's reads are as asked.
type Present struct {
	*base.REST
}

// List is the kind's list; an agent's only at the present revision.
func (r *Present) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	if isAgent(ctx) && readsHistory(options) {
		return nil, r.pastRevision(options.ResourceVersion)
	}
	return r.REST.List(ctx, options)
}

// Watch is the kind's watch; an agent's only from a revision no older than
// the objects it selects, so that it replays none of their past.
func (r *Present) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	if !isAgent(ctx) || options == nil || (options.SendInitialEvents != nil && *options.SendInitialEvents) {
		// A watch that starts with the objects as they are replays
		// nothing before them.
		return r.REST.Watch(ctx, options)
	}
	from, err := strconv.ParseUint(options.ResourceVersion, 10, 64)
	if err != nil || from == 0 {
		// "" and "0" start from the present; anything else that is no
		// revision is the library's to refuse.
		return r.REST.Watch(ctx, options)
	}
	present, err := r.REST.List(ctx, &metainternalversion.ListOptions{
		LabelSelector: options.LabelSelector, FieldSelector: options.FieldSelector, ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(present)
	if err != nil {
		return nil, err
	}
	for _, item := range items {
		o, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		if changed, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64); err != nil || changed > from {
			return nil, r.pastRevision(options.ResourceVersion)
		}
	}
	return r.REST.Watch(ctx, options)
}

func isAgent(ctx context.Context) bool {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return false
	}
	_, _, agent := auth.NodeOf(u)
	return agent
}

func (r *Present) pastRevision(resourceVersion string) error {
	return apierrors.NewGone(fmt.Sprintf("a node agent reads %s as they are now, not as they were at resourceVersion %s: "+
		"list again without a resourceVersion, and watch from the one that list returns", r.Store.DefaultQualifiedResource.String(), resourceVersion))
}
