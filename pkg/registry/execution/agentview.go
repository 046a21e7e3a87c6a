package execution

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/agentview"
)

// List shows a node agent only the executions on its host that have not
// finished (agentView).
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.agentView().List(ctx, options, r.REST.List)
}

// Watch is List's view as a watch: an execution that finishes leaves an
// agent's watch as deleted, without its spec (it needs the UID alone, to
// stop it).
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return r.agentView().Watch(ctx, options, r.REST.Watch)
}

// agentView narrows a node agent's reads to the executions that have not
// finished: those are what it runs and reports. A finished one is the
// borrower's record, command and environment included, kept until the
// borrower deletes it; an agent's credential is its host's, which a tenant
// with root there may have copied (docs/security.md), and would read every
// earlier borrower's executions on the host.
func (r *REST) agentView() agentview.View {
	return agentview.View{Store: r.REST.Store, Shown: unfinished}
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
