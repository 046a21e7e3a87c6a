package reservation

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/agentview"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Storage is the Reservation resource and its status.
func Storage(reservations base.Stores) map[string]rest.Storage {
	storage := reservations.Storage("reservations", "rsv")
	storage["reservations"] = &REST{REST: storage["reservations"].(*base.REST)}
	return storage
}

// REST shows a node's agent only the reservations whose access its node
// applies now (agentView).
type REST struct {
	*base.REST
}

// List is the reservations as asked; a node agent's, those it serves now.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.agentView().List(ctx, options, r.REST.List)
}

// Watch is List's view as a watch: a reservation whose access ended leaves
// an agent's watch as deleted, by its name and UID, which is what the agent
// retires it by.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return r.agentView().Watch(ctx, options, r.REST.Watch)
}

// agentView narrows a node agent's reads to the reservations whose access
// its node applies: one that is active, or whose access is being retired
// (releasing, ending). One that ended (released, ended) stays on its node's
// list until deleted, and names a project, its login user and term, and who
// released it; the agent's credential is its host's, which a later tenant
// with root there may have copied (docs/security.md). A pending one has no
// node yet.
func (r *REST) agentView() agentview.View {
	return agentview.View{Store: r.REST.Store, Shown: served}
}

// unserved are the states whose access no agent applies.
var unserved = []nodusv1.ReservationState{"", nodusv1.ReservationStatePending, nodusv1.ReservationStateReleased, nodusv1.ReservationStateEnded}

// served selects the reservations in a state whose access an agent applies.
var served = func() fields.Selector {
	var terms []fields.Selector
	for _, s := range unserved {
		terms = append(terms, fields.OneTermNotEqualSelector("status.state", string(s)))
	}
	return fields.AndSelectors(terms...)
}()
