// Package noderestriction keeps a node's agent to the facts it reports
// about its own node, as Kubernetes' NodeRestriction does for kubelets: its
// status writes may change the inventory, the SSH host key and address and
// its execution slots, never what the server decides — the provision state,
// the allocation and reservation claims, the cleaning request and its
// outcome, conditions, epochs, the agent generation or heartbeat times.
// Those come from the server's own controllers and from evidence the
// heartbeat handler checks. Nor may it change the Node's metadata: a
// finalizer would keep a node the operator deleted, and the credentials
// that name it, alive; labels and annotations are the operator's. And only
// the node's current agent writes at all: the credential is checked again
// against the node the write lands on.
//
// An operator's status write (anyone's but the server's own controllers)
// may not move the lifecycle's fields either: the claims, the cleaning, the
// provision state and the evidence the drain and refusals are judged on.
// A claim cleared by hand let the next reservation take a node whose
// tenant still had access; a cleaning marked done, an uncleaned node.
// Operators move them through the server's actions (reservations,
// allocations, nodus nodes clean); what an agent reports they may correct.
package noderestriction

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
}

// New returns the check for updates.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Update)}
}

var _ admission.ValidationInterface = &Plugin{}

// serverOwned are the status fields only the server writes.
var serverOwned = []struct {
	name string
	get  func(*nodusv1.NodeStatus) interface{}
}{
	{"provisionState", func(s *nodusv1.NodeStatus) interface{} { return s.ProvisionState }},
	{"allocation", func(s *nodusv1.NodeStatus) interface{} { return s.Allocation }},
	{"allocationUID", func(s *nodusv1.NodeStatus) interface{} { return s.AllocationUID }},
	{"reservation", func(s *nodusv1.NodeStatus) interface{} { return s.Reservation }},
	{"reservationUID", func(s *nodusv1.NodeStatus) interface{} { return s.ReservationUID }},
	{"cleaning", func(s *nodusv1.NodeStatus) interface{} { return s.Cleaning }},
	{"conditions", func(s *nodusv1.NodeStatus) interface{} { return s.Conditions }},
	{"appliedEpoch", func(s *nodusv1.NodeStatus) interface{} { return s.AppliedEpoch }},
	{"agentGeneration", func(s *nodusv1.NodeStatus) interface{} { return s.AgentGeneration }},
	{"lastHeartbeatTime", func(s *nodusv1.NodeStatus) interface{} { return s.LastHeartbeatTime }},
	// The agent's refusals come with its heartbeats, which say which
	// reservation on the node, at which epoch, they are about.
	{"accessRefusal", func(s *nodusv1.NodeStatus) interface{} { return s.AccessRefusal }},
}

// lifecycleOwned are the server-owned fields no one else writes, operators
// included: the server's own controllers write them through the loopback.
var lifecycleOwned = map[string]bool{
	"provisionState": true, "allocation": true, "allocationUID": true, "reservation": true, "reservationUID": true,
	"cleaning": true, "appliedEpoch": true, "accessRefusal": true,
}

// operatorOwned is the metadata an agent's status write must leave as it is.
var operatorOwned = []struct {
	name string
	get  func(*nodusv1.Node) interface{}
}{
	{"labels", func(n *nodusv1.Node) interface{} { return n.Labels }},
	{"annotations", func(n *nodusv1.Node) interface{} { return n.Annotations }},
	{"finalizers", func(n *nodusv1.Node) interface{} { return n.Finalizers }},
	{"ownerReferences", func(n *nodusv1.Node) interface{} { return n.OwnerReferences }},
}

// Validate refuses an agent's node status write that changes a field the server owns.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("nodes") || a.GetSubresource() != "status" {
		return nil
	}
	n, ok1 := a.GetObject().(*nodusv1.Node)
	old, ok2 := a.GetOldObject().(*nodusv1.Node)
	if !ok1 || !ok2 {
		return nil
	}
	u := a.GetUserInfo()
	if _, _, isAgent := auth.NodeOf(u); !isAgent {
		if isServer(u) {
			return nil
		}
		var changed []string
		for _, f := range serverOwned {
			if lifecycleOwned[f.name] && !equality.Semantic.DeepEqual(f.get(&n.Status), f.get(&old.Status)) {
				changed = append(changed, "status."+f.name)
			}
		}
		if len(changed) == 0 {
			return nil
		}
		return apierror.New(ctx, apierror.ReasonServerOwnedField, a.GetResource().GroupResource(), a.GetName(),
			fmt.Sprintf("%s are the node's lifecycle's, which the server writes alone: change them through reservations, allocations or nodus nodes clean", strings.Join(changed, ", ")), "")
	}
	// The authorizer judged the credential by the watch cache, which may
	// still show the node before it was enrolled again or made anew; old
	// is the node the write lands on.
	if why := auth.AgentRetired(u, old); why != "" {
		return apierror.New(ctx, apierror.ReasonAgentCredentialRetired, a.GetResource().GroupResource(), a.GetName(), why, "")
	}
	var changed []string
	for _, f := range operatorOwned {
		if !equality.Semantic.DeepEqual(f.get(n), f.get(old)) {
			changed = append(changed, "metadata."+f.name)
		}
	}
	for _, f := range serverOwned {
		if !equality.Semantic.DeepEqual(f.get(&n.Status), f.get(&old.Status)) {
			changed = append(changed, "status."+f.name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return apierror.New(ctx, apierror.ReasonServerOwnedField, a.GetResource().GroupResource(), a.GetName(),
		fmt.Sprintf("a node agent reports only its inventory, SSH host key and address and execution slots; %s are not its to write", strings.Join(changed, ", ")), "")
}

// isServer says whether u is the server itself: its loopback, which its
// controllers write through.
func isServer(u user.Info) bool {
	return u.GetName() == user.APIServerUser && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}
