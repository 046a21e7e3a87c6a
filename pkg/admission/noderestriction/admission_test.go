package noderestriction

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

func TestAgentsWriteOnlyTheirOwnFacts(t *testing.T) {
	old := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: nodusv1.NodeStatus{
		ProvisionState: nodusv1.ProvisionStateCleaning, AgentGeneration: 2, AppliedEpoch: 4,
		Cleaning: &nodusv1.NodeCleaning{Request: 1, Phase: nodusv1.CleaningPending}}}
	agent := &user.DefaultInfo{Name: auth.NodeUserPrefix + "n1", Groups: []string{auth.GroupNodes},
		Extra: map[string][]string{auth.ExtraAgentGeneration: {"2"}}}
	operator := &user.DefaultInfo{Name: "nodus-admin", Groups: []string{"nodus:operators"}}
	cases := map[string]struct {
		change  func(*nodusv1.NodeStatus)
		who     user.Info
		refused string
	}{
		"inventory":               {change: func(s *nodusv1.NodeStatus) { s.Inventory.CPU = 64 }, who: agent},
		"ssh address":             {change: func(s *nodusv1.NodeStatus) { s.SSHAddress = "10.0.0.1:22" }, who: agent},
		"execution slots":         {change: func(s *nodusv1.NodeStatus) { s.ExecutionSlots = 8 }, who: agent},
		"provision state":         {change: func(s *nodusv1.NodeStatus) { s.ProvisionState = nodusv1.ProvisionStateAvailable }, who: agent, refused: "status.provisionState"},
		"the cleaning outcome":    {change: func(s *nodusv1.NodeStatus) { s.Cleaning.Phase = nodusv1.CleaningSucceeded }, who: agent, refused: "status.cleaning"},
		"the reservation claim":   {change: func(s *nodusv1.NodeStatus) { s.Reservation = "r9" }, who: agent, refused: "status.reservation"},
		"the claim's UID":         {change: func(s *nodusv1.NodeStatus) { s.ReservationUID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427" }, who: agent, refused: "status.reservationUID"},
		"the allocation":          {change: func(s *nodusv1.NodeStatus) { s.Allocation = "a9" }, who: agent, refused: "status.allocation"},
		"the applied epoch":       {change: func(s *nodusv1.NodeStatus) { s.AppliedEpoch = 9 }, who: agent, refused: "status.appliedEpoch"},
		"the agent generation":    {change: func(s *nodusv1.NodeStatus) { s.AgentGeneration = 9 }, who: agent, refused: "status.agentGeneration"},
		"conditions":              {change: func(s *nodusv1.NodeStatus) { s.Conditions = []metav1.Condition{{Type: "Ready"}} }, who: agent, refused: "status.conditions"},
		"the heartbeat time":      {change: func(s *nodusv1.NodeStatus) { s.LastHeartbeatTime = &metav1.Time{} }, who: agent, refused: "status.lastHeartbeatTime"},
		"an operator may, though": {change: func(s *nodusv1.NodeStatus) { s.ProvisionState = nodusv1.ProvisionStateAvailable }, who: operator},
	}
	for name, tc := range cases {
		next := old.DeepCopy()
		tc.change(&next.Status)
		attrs := admission.NewAttributesRecord(next, old, nodusv1.SchemeGroupVersion.WithKind("Node"), "", "n1",
			nodusv1.SchemeGroupVersion.WithResource("nodes"), "status", admission.Update, &metav1.UpdateOptions{}, false, tc.who)
		err := New().Validate(context.Background(), attrs, nil)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: got %v, want a refusal naming %s", name, err, tc.refused)
		}
	}
}
