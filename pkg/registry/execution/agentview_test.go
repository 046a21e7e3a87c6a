package execution

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// An agent is shown exactly the executions that have not finished.
func TestAnAgentSeesOnlyUnfinishedExecutions(t *testing.T) {
	for _, p := range []nodusv1.ExecutionPhase{"", nodusv1.ExecutionPending, nodusv1.ExecutionScheduled, nodusv1.ExecutionRunning,
		nodusv1.ExecutionSucceeded, nodusv1.ExecutionFailed, nodusv1.ExecutionDrained, nodusv1.ExecutionCancelled} {
		if sees := unfinished.Matches(fields.Set{"status.host": "host-abc", "status.phase": string(p)}); sees == p.Finished() {
			t.Errorf("phase %q (finished: %v): the agent sees it: %v", p, p.Finished(), sees)
		}
	}
}
