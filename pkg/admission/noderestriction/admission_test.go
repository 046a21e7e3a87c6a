package noderestriction

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

func TestAgentsWriteOnlyTheirOwnFacts(t *testing.T) {
	old := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "5f0c6f8e-2f6b-4c43-9a9e-1f2d3c4b5a69"}, Status: nodusv1.NodeStatus{
		ProvisionState: nodusv1.ProvisionStateCleaning, AgentGeneration: 2, AppliedEpoch: 4,
		Cleaning: &nodusv1.NodeCleaning{Request: 1, Phase: nodusv1.CleaningPending}}}
	agent := &user.DefaultInfo{Name: auth.NodeUserPrefix + "n1", Groups: []string{auth.GroupNodes},
		Extra: map[string][]string{auth.ExtraAgentGeneration: {"2"}, auth.ExtraNodeUID: {"5f0c6f8e-2f6b-4c43-9a9e-1f2d3c4b5a69"}}}
	operator := &user.DefaultInfo{Name: "nodus-admin", Groups: []string{"nodus:operators"}}
	cases := map[string]struct {
		change  func(*nodusv1.NodeStatus)
		who     user.Info
		refused string
	}{
		"inventory":             {change: func(s *nodusv1.NodeStatus) { s.Inventory.CPU = 64 }, who: agent},
		"ssh address":           {change: func(s *nodusv1.NodeStatus) { s.SSHAddress = "10.0.0.1:22" }, who: agent},
		"execution slots":       {change: func(s *nodusv1.NodeStatus) { s.ExecutionSlots = 8 }, who: agent},
		"provision state":       {change: func(s *nodusv1.NodeStatus) { s.ProvisionState = nodusv1.ProvisionStateAvailable }, who: agent, refused: "status.provisionState"},
		"the cleaning outcome":  {change: func(s *nodusv1.NodeStatus) { s.Cleaning.Phase = nodusv1.CleaningSucceeded }, who: agent, refused: "status.cleaning"},
		"the reservation claim": {change: func(s *nodusv1.NodeStatus) { s.Reservation = "r9" }, who: agent, refused: "status.reservation"},
		"the claim's UID":       {change: func(s *nodusv1.NodeStatus) { s.ReservationUID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427" }, who: agent, refused: "status.reservationUID"},
		"the allocation":        {change: func(s *nodusv1.NodeStatus) { s.Allocation = "a9" }, who: agent, refused: "status.allocation"},
		"the allocation's UID":  {change: func(s *nodusv1.NodeStatus) { s.AllocationUID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427" }, who: agent, refused: "status.allocationUID"},
		"the applied epoch":     {change: func(s *nodusv1.NodeStatus) { s.AppliedEpoch = 9 }, who: agent, refused: "status.appliedEpoch"},
		"the agent generation":  {change: func(s *nodusv1.NodeStatus) { s.AgentGeneration = 9 }, who: agent, refused: "status.agentGeneration"},
		"conditions":            {change: func(s *nodusv1.NodeStatus) { s.Conditions = []metav1.Condition{{Type: "Ready"}} }, who: agent, refused: "status.conditions"},
		"the heartbeat time":    {change: func(s *nodusv1.NodeStatus) { s.LastHeartbeatTime = &metav1.Time{} }, who: agent, refused: "status.lastHeartbeatTime"},
		// An operator corrects what an agent reports, and nothing of the
		// lifecycle; the server's own controllers write it.
		"an operator's inventory":        {change: func(s *nodusv1.NodeStatus) { s.Inventory.CPU = 64 }, who: operator},
		"an operator's agent generation": {change: func(s *nodusv1.NodeStatus) { s.AgentGeneration = 3 }, who: operator},
		"an operator's provision state":  {change: func(s *nodusv1.NodeStatus) { s.ProvisionState = nodusv1.ProvisionStateAvailable }, who: operator, refused: "status.provisionState"},
		"an operator's cleaning outcome": {change: func(s *nodusv1.NodeStatus) { s.Cleaning.Phase = nodusv1.CleaningSucceeded }, who: operator, refused: "status.cleaning"},
		"an operator's claim":            {change: func(s *nodusv1.NodeStatus) { s.Reservation = "r9" }, who: operator, refused: "status.reservation"},
		"an operator's allocation":       {change: func(s *nodusv1.NodeStatus) { s.Allocation = "a9" }, who: operator, refused: "status.allocation"},
		"an operator's applied epoch":    {change: func(s *nodusv1.NodeStatus) { s.AppliedEpoch = 9 }, who: operator, refused: "status.appliedEpoch"},
		"the server's claim": {change: func(s *nodusv1.NodeStatus) { s.Reservation = "r9" },
			who: &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.AllAuthenticated, user.SystemPrivilegedGroup}}},
		"a privileged user's claim is not the server's": {change: func(s *nodusv1.NodeStatus) { s.Reservation = "r9" },
			who: &user.DefaultInfo{Name: "someone", Groups: []string{user.SystemPrivilegedGroup}}, refused: "status.reservation"},
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

// TestARetiredAgentWritesNothingWhileTheCacheLags: the authorizer checks an
// agent's credential against the watch cache, which may still show the
// node before it was enrolled again (or deleted and made anew). The write
// itself lands on etcd's current node: there a credential of an older
// generation, or of another Node object, is refused, so that a retired
// agent cannot set, say, the SSH host key customers pin.
func TestARetiredAgentWritesNothingWhileTheCacheLags(t *testing.T) {
	const uid = "5f0c6f8e-2f6b-4c43-9a9e-1f2d3c4b5a69"
	current := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: uid}, Status: nodusv1.NodeStatus{AgentGeneration: 3}}
	agent := func(generation, nodeUID string) user.Info {
		return &user.DefaultInfo{Name: auth.NodeUserPrefix + "n1", Groups: []string{auth.GroupNodes},
			Extra: map[string][]string{auth.ExtraAgentGeneration: {generation}, auth.ExtraNodeUID: {nodeUID}}}
	}
	for name, tc := range map[string]struct {
		who     user.Info
		refused bool
	}{
		"the current agent":                         {agent("3", uid), false},
		"an agent of the generation before":         {agent("2", uid), true},
		"an agent of a node deleted and made again": {agent("3", "0e6f7a1b-9c2d-4e3f-8a5b-6c7d8e9f0a1b"), true},
	} {
		next := current.DeepCopy()
		next.Status.SSHHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXxFgGqQ8L9Y2pGk6n2V3p5cS0m4Cq5ZrM0tBq2mB7e"
		attrs := admission.NewAttributesRecord(next, current, nodusv1.SchemeGroupVersion.WithKind("Node"), "", "n1",
			nodusv1.SchemeGroupVersion.WithResource("nodes"), "status", admission.Update, &metav1.UpdateOptions{}, false, tc.who)
		err := New().Validate(context.Background(), attrs, nil)
		switch {
		case tc.refused && apierrors.ReasonForError(err) != apierror.ReasonAgentCredentialRetired:
			t.Errorf("%s: got %v, want a refusal of the retired credential", name, err)
		case !tc.refused && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}
