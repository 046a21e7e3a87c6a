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
package noderestriction

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"

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
	if _, _, isAgent := auth.NodeOf(a.GetUserInfo()); !isAgent {
		return nil
	}
	n, ok1 := a.GetObject().(*nodusv1.Node)
	old, ok2 := a.GetOldObject().(*nodusv1.Node)
	if !ok1 || !ok2 {
		return nil
	}
	// The authorizer judged the credential by the watch cache, which may
	// still show the node before it was enrolled again or made anew; old
	// is the node the write lands on.
	if why := auth.AgentRetired(a.GetUserInfo(), old); why != "" {
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
