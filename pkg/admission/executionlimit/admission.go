// Package executionlimit bounds how many Executions a project keeps: each
// is at most validation.MaxExecutionBytes, and its kept output at most
// nodusv1.MaxExecutionLogBytes, so a borrower cannot make the server store
// more than the product. Executions that ended count until they are
// deleted: the bound is on what is stored (outputs included, which the
// counter counts where they outlived their Executions).
package executionlimit

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// DefaultMax is the bound when none is configured.
const DefaultMax = 1000

// Counter counts a project's Executions, every create answered before
// included (a burst of concurrent creates may still pass the bound by the
// size of the burst: admission does not serialize them).
type Counter interface {
	CountExecutions(ctx context.Context, project string) (int, error)
}

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
	Executions Counter
	Max        int
}

// New returns the check for creates.
func New(executions Counter, max int) *Plugin {
	if max <= 0 {
		max = DefaultMax
	}
	return &Plugin{Handler: admission.NewHandler(admission.Create), Executions: executions, Max: max}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses an Execution in a project that holds Max of them.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("executions") || a.GetSubresource() != "" {
		return nil
	}
	n, err := p.Executions.CountExecutions(ctx, a.GetNamespace())
	if err != nil {
		return err
	}
	if n >= p.Max {
		return apierror.New(ctx, apierror.ReasonExecutionLimitReached, a.GetResource().GroupResource(), a.GetName(),
			fmt.Sprintf("project %q holds %d executions, the most it may; delete those that ended", a.GetNamespace(), n), "")
	}
	return nil
}
