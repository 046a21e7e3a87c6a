package execution

import (
	"context"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// An agent's view keeps exactly the executions that have not finished, on
// top of the host it selected; others' views are as asked.
func TestAnAgentSeesOnlyUnfinishedExecutions(t *testing.T) {
	agent := &user.DefaultInfo{Name: auth.NodeUserPrefix + "gpu-001", Groups: []string{auth.GroupNodes},
		Extra: map[string][]string{auth.ExtraAgentGeneration: {"1"}}}
	asked := &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.host", "host-abc")}
	view, _ := agentView(genericapirequest.WithUser(context.Background(), agent), asked)
	if asked.FieldSelector.String() != "status.host=host-abc" {
		t.Fatalf("the caller's options changed: %s", asked.FieldSelector)
	}
	for _, p := range []nodusv1.ExecutionPhase{nodusv1.ExecutionPending, nodusv1.ExecutionScheduled, nodusv1.ExecutionRunning,
		nodusv1.ExecutionSucceeded, nodusv1.ExecutionFailed, nodusv1.ExecutionDrained, nodusv1.ExecutionCancelled} {
		on := fields.Set{"status.host": "host-abc", "status.phase": string(p)}
		if view.FieldSelector.Matches(on) == p.Finished() {
			t.Errorf("phase %s (finished: %v): the agent sees it: %v", p, p.Finished(), view.FieldSelector.Matches(on))
		}
		if view.FieldSelector.Matches(fields.Set{"status.host": "host-other", "status.phase": string(p)}) {
			t.Errorf("phase %s on another host is in the agent's view", p)
		}
	}
	member := &user.DefaultInfo{Name: "mary"}
	if got, _ := agentView(genericapirequest.WithUser(context.Background(), member), asked); got != asked {
		t.Errorf("a member's view was narrowed: %s", got.FieldSelector)
	}
	if got, _ := agentView(genericapirequest.WithUser(context.Background(), agent), nil); got.FieldSelector.Matches(fields.Set{"status.phase": "succeeded"}) {
		t.Errorf("an agent's list without options sees finished executions")
	}
}
