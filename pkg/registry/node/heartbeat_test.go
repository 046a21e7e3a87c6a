package node

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// TestAnOldCredentialsBeatIsNotHeard: a watch cache that has not seen a
// re-enrollment lets the previous agent's credential (generation 1) past
// the authorizer; its beat, naming the new generation read from etcd, must
// still not count — its evidence would release reservations and record
// cleanings in the new agent's name.
func TestAnOldCredentialsBeatIsNotHeard(t *testing.T) {
	agentOf := func(generation, uid string) user.Info {
		return &user.DefaultInfo{Name: auth.NodeUserPrefix + "n1", Groups: []string{auth.GroupNodes, auth.GroupAuthenticated},
			Extra: map[string][]string{auth.ExtraAgentGeneration: {generation}, auth.ExtraNodeUID: {uid}}}
	}
	operator := &user.DefaultInfo{Name: "admin", Groups: []string{auth.GroupAuthenticated}}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}, Status: nodusv1.NodeStatus{AgentGeneration: 2}}
	cases := []struct {
		name       string
		u          user.Info
		generation int64
		heard      string // "" when it is heard, else a word of why not
	}{
		{"the current agent", agentOf("2", "uid-1"), 2, ""},
		{"the previous agent naming the new generation", agentOf("1", "uid-1"), 2, "credential is of generation 1"},
		{"the previous agent naming its own", agentOf("1", "uid-1"), 1, "generation 1"},
		{"a deleted namesake's agent", agentOf("2", "uid-0"), 2, "deleted"},
		{"an operator naming the generation", operator, 2, ""},
		{"an operator naming another", operator, 1, "not node \"n1\"'s current generation 2"},
	}
	for _, tc := range cases {
		why := staleBeat(tc.u, &nodusv1.NodeHeartbeat{AgentGeneration: tc.generation}, node)
		if (why == "") != (tc.heard == "") || !strings.Contains(why, tc.heard) {
			t.Errorf("%s: staleBeat = %q, want %q", tc.name, why, tc.heard)
		}
	}
}
