package execution

import (
	"k8s.io/apimachinery/pkg/fields"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// unfinished selects what a node agent lists and watches of the
// executions (agentview.REST): those that have not finished, which are
// what it runs and reports. A finished one is the borrower's record,
// command and environment included, kept until the borrower deletes it; an
// agent's credential is its host's, which a tenant with root there may
// have copied (docs/security.md), and would read every earlier borrower's
// executions on the host.
var unfinished = func() fields.Selector {
	var terms []fields.Selector
	for _, p := range finalPhases {
		terms = append(terms, fields.OneTermNotEqualSelector("status.phase", string(p)))
	}
	return fields.AndSelectors(terms...)
}()

// finalPhases are the phases in which an execution has ended
// (ExecutionPhase.Finished).
var finalPhases = []nodusv1.ExecutionPhase{nodusv1.ExecutionSucceeded, nodusv1.ExecutionFailed, nodusv1.ExecutionDrained, nodusv1.ExecutionCancelled}
