package reservation

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apivalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/allocation"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
)

// LabelReservation names, on a ReservedHost, the Reservation it projects
// (and, on an Allocation the controller made, the Reservation it serves).
const LabelReservation = allocation.LabelReservation

// LabelReservationUID is, on an Allocation the controller made, the UID of
// the Reservation it serves: a reservation deleted and made again under its
// name is another one, and the first one's allocation is deleted, never
// taken over. (ReservedHosts do without: one in another project than the
// reservation's is an earlier one's, and 10,000 labels cost the etcd
// database a growth step, 16 MiB of the server's memory.)
const LabelReservationUID = "nodus.dev/reservation-uid"

// observed is what the controller saw of one reservation's world.
type observed struct {
	now         time.Time
	reservation *nodusv1.Reservation
	node        *nodusv1.Node       // the node of status.node, else of the placement; nil while none (or unknown)
	target      *nodusv1.Node       // the node the placement resolves to now, when it differs from node
	held        []*nodusv1.Node     // the nodes whose claim names this reservation
	allocation  *nodusv1.Allocation // nil unless placement names or implies one
	// allocationTaken: the allocation a class placement makes exists, not
	// made for this reservation (allocation is then nil).
	allocationTaken bool
	host            *nodusv1.ReservedHost
	project         *nodusv1.Project // nil while unknown
}

// decision is what reconcile wants changed.
type decision struct {
	status *nodusv1.ReservationStatus // nil: unchanged
	host   *nodusv1.ReservedHost      // the desired projection; nil: none yet
	// claim is the target node with this reservation's claim, written before
	// anything else; once it is written the reservation is reconciled again.
	claim *nodusv1.Node
	// handovers are nodes this reservation lets go, each with a cleaning
	// request, written after the status.
	handovers    []*nodusv1.Node
	releaseAlloc bool          // the term is over: free the allocation
	requeue      time.Duration // 0: only on the next event
	// lostNode names the node the reservation's access ends on because
	// another reservation holds it: the controller confirms that from etcd
	// before it writes anything.
	lostNode string
}

// reconcile is what the controller makes of one reservation's world: the
// lifecycle step (pkg/lifecycle decides it) and the customer's projection.
func reconcile(o observed) decision {
	r := o.reservation
	target := o.targetNode()
	loginUser := effectiveLoginUser(r, target)
	access := r.Status.ProjectAccessRevision // unchanged while the project is not in the cache
	if o.project != nil {
		access = o.project.Status.AccessRevision
	}
	step := lifecycle.Advance(r, lifecycle.Placement{Node: placedNode(o), Target: target, LoginUser: loginUser}, o.held, access, o.now)
	st := step.Status
	d := decision{claim: step.Claim, handovers: step.Handovers, releaseAlloc: step.ReleaseAllocation, requeue: step.Requeue, lostNode: step.LostNode}
	blocker := step.Blocker
	if o.allocation != nil {
		st.Allocation = o.allocation.Name
	}
	setReservationConditions(st, r, o, blocker)
	if !equality.Semantic.DeepEqual(st, &r.Status) {
		d.status = st
	}
	next := r.DeepCopy()
	next.Status = *st
	if loginUser != "" || st.LoginUser != "" {
		// Without a login user there is nothing a customer could use yet;
		// the Placed condition says what is missing.
		d.host = project(next, o)
	}
	return d
}

// targetNode is the node the placement resolves to now, or nil.
func (o observed) targetNode() *nodusv1.Node {
	placed := placedNode(o)
	switch {
	case o.target != nil && o.target.Name == placed:
		return o.target
	case o.node != nil && o.node.Name == placed:
		return o.node
	}
	return nil
}

// placedNode is the node the placement resolves to now, or "".
func placedNode(o observed) string {
	p := o.reservation.Spec.Placement
	switch {
	case p.Node != "":
		return p.Node
	case o.allocation != nil && o.allocation.Status.State == nodusv1.AllocationStateActive:
		return o.allocation.Status.Node
	}
	return ""
}

func effectiveLoginUser(r *nodusv1.Reservation, node *nodusv1.Node) string {
	if r.Spec.LoginUser != "" {
		return r.Spec.LoginUser
	}
	if node != nil {
		return node.Spec.LoginUser
	}
	return ""
}

func setReservationConditions(st *nodusv1.ReservationStatus, r *nodusv1.Reservation, o observed, blocker *lifecycle.Blocker) {
	placed := metav1.Condition{Type: "Placed", Status: metav1.ConditionTrue, Reason: "NodeAssigned",
		Message: fmt.Sprintf("placed on node %s", st.Node), LastTransitionTime: metav1.Time{Time: o.now}}
	switch {
	case blocker != nil && blocker.Reason == apierror.ReasonNodeLost:
		placed.Status, placed.Reason, placed.Message = metav1.ConditionFalse, string(blocker.Reason), blocker.Message
	case lifecycle.LostNode(r) && st.Node == r.Status.Node && st.State != nodusv1.ReservationStateActive:
		return // it keeps saying why its access ended
	case blocker != nil && st.Node == "":
		placed.Status, placed.Reason, placed.Message = metav1.ConditionFalse, string(blocker.Reason), blocker.Message
	case blocker != nil:
		// Active elsewhere: the move to the new placement waits.
		placed.Reason = string(blocker.Reason)
		placed.Message = fmt.Sprintf("placed on node %s; the move to %s waits: %s", st.Node, placedNode(o), blocker.Message)
	case st.Node == "" && placedNode(o) != "" && effectiveLoginUser(r, o.targetNode()) == "":
		placed.Status, placed.Reason = metav1.ConditionFalse, string(apierror.ReasonLoginUserUnknown)
		placed.Message = "neither the reservation nor node " + placedNode(o) + " names a loginUser"
	case st.Node == "" && o.allocationTaken:
		name := lifecycle.AllocationName(r)
		placed.Status, placed.Reason = metav1.ConditionFalse, string(apierror.ReasonAllocationNameTaken)
		placed.Message = fmt.Sprintf("allocation %s, which this reservation would make, exists and was not made for it; it waits until that allocation is deleted (`kubectl delete allocation %s`; an Ironic rename leaves its object name)", name, name)
	case st.Node == "":
		placed.Status, placed.Reason = metav1.ConditionFalse, string(apierror.ReasonAwaitingNode)
		placed.Message = "no node is placed yet"
		if r.Spec.Placement.Allocation != "" || r.Spec.Placement.ResourceClass != "" {
			placed.Message = "waiting for allocation " + lifecycle.AllocationName(r) + " to become active"
			switch a := o.allocation; {
			case a != nil && a.Status.State == nodusv1.AllocationStateError:
				placed.Message = fmt.Sprintf("allocation %s failed: %s", a.Name, a.Status.LastError)
			case a != nil && a.Status.LastError != "":
				// The allocation's reason, so that an operator looking at
				// the reservation learns why it waits.
				placed.Message += ": " + a.Status.LastError
			}
		}
	}
	meta.SetStatusCondition(&st.Conditions, placed)
}

// project builds the customer-safe ReservedHost of r.
func project(r *nodusv1.Reservation, o observed) *nodusv1.ReservedHost {
	host := &nodusv1.ReservedHost{}
	if o.host != nil {
		host = o.host.DeepCopy()
	}
	host.Name, host.Namespace = r.Name, r.Spec.Project
	if host.Labels == nil {
		host.Labels = map[string]string{}
	}
	host.Labels[LabelReservation] = r.Name
	reservedhost.ApplyReservation(host, r)
	// The release request's fieldManager, as the spec wants it on the host;
	// one Kubernetes refuses (stored before the release endpoint cleaned
	// user agents) would fail every write of the host, so it is left out.
	if m := r.Status.ReleaseFieldManager; m != "" && r.Status.Release != nil && len(apivalidation.ValidateFieldManager(m, nil)) == 0 {
		reservedhost.RecordRelease(host, m, r.Status.Release.RequestedAt)
	}
	if host.Status.Reservation.LoginUser == "" {
		// Before activation the host shows the account access will be for.
		host.Status.Reservation.LoginUser = effectiveLoginUser(r, o.node)
	}

	node := o.node
	switch {
	case node != nil && node.Name != r.Status.Node:
		node = nil // the placement moved on: show nothing of a node the reservation left
	case node != nil && !lifecycle.Holds(r, node):
		// Handed over, another reservation's (NodeLost), or a machine
		// enrolled under the name of a deleted one that this reservation
		// has not claimed: what the node reports now is the operator's
		// cleaning, the next tenant's time or another machine, none of it
		// this tenant's to see. The host keeps what it showed last.
		node = nil
	}
	host.Status.Connect = nil
	if node != nil {
		host.Status.Inventory = node.Status.Inventory
		host.Status.Pool = node.Spec.Pool
		host.Status.LastHeartbeatTime = node.Status.LastHeartbeatTime
		if node.Status.SSHHostKey != "" && node.Status.SSHAddress != "" && host.Status.Reservation.LoginUser != "" {
			host.Status.Connect = &nodusv1.ReservedHostConnect{
				Command:   fmt.Sprintf("nodus ssh %s/%s", r.Spec.Project, r.Name),
				Host:      fmt.Sprintf("%s.%s.nodus", r.Name, r.Spec.Project),
				HostKey:   node.Status.SSHHostKey,
				LoginUser: host.Status.Reservation.LoginUser,
			}
		}
	}
	now := metav1.Time{Time: o.now}
	meta.SetStatusCondition(&host.Status.Conditions, connected(r, node, now))
	meta.SetStatusCondition(&host.Status.Conditions, eligible(r, now))
	return host
}

func connected(r *nodusv1.Reservation, node *nodusv1.Node, now metav1.Time) metav1.Condition {
	c := metav1.Condition{Type: nodusv1.ReservedHostConditionConnected, Status: metav1.ConditionFalse, LastTransitionTime: now}
	switch {
	case node == nil && lifecycle.Final(r.Status.State):
		c.Reason, c.Message = "AccessEnded", "the reservation's access ended and the host was handed back"
	case node == nil && r.Status.Node != "":
		c.Reason, c.Message = "NoHost", "the host's machine was removed or replaced by its provider, and is not this reservation's now"
	case node == nil:
		c.Reason, c.Message = "NoHost", "no physical host is placed yet"
	case !meta.IsStatusConditionTrue(node.Status.Conditions, nodusv1.NodeConditionReady):
		c.Reason, c.Message = "HeartbeatMissing", "the host's agent has not reported within three heartbeat intervals"
	case refusedHere(r, node):
		// The agent's words, validated as one line where the heartbeat
		// landed: why the host does not let this tenant in.
		c.Reason = "AccessRefused"
		c.Message = fmt.Sprintf("the host's agent does not grant access at epoch %d: %s", r.Status.Epoch, node.Status.AccessRefusal.Message)
	case node.Status.AppliedEpoch != r.Status.Epoch:
		c.Reason = "EpochNotApplied"
		c.Message = fmt.Sprintf("the host's agent applied epoch %d, the reservation is at epoch %d", node.Status.AppliedEpoch, r.Status.Epoch)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, "AgentCurrent"
		c.Message = fmt.Sprintf("the host's current agent reports on time at epoch %d", r.Status.Epoch)
	}
	if node != nil && node.Status.SSHHostKey != "" && node.Status.SSHAddress == "" {
		// Whatever the agent's currency, no one can connect to the host;
		// an agent that has reported neither has reported nothing yet.
		c.Message += "; the agent reports no address where its SSH server is reached (nodusd --ssh-address), so the host shows no connect and gives no certificate (SSHAddressUnknown)"
	}
	return c
}

// refusedHere says whether node's agent reported that it does not grant
// r's access at r's current epoch: r itself, not an earlier reservation of
// its name.
func refusedHere(r *nodusv1.Reservation, node *nodusv1.Node) bool {
	a := node.Status.AccessRefusal
	return a != nil && a.Reservation == r.Name && a.ReservationUID == r.UID && a.Epoch == r.Status.Epoch
}

func eligible(r *nodusv1.Reservation, now metav1.Time) metav1.Condition {
	c := metav1.Condition{Type: nodusv1.ReservedHostConditionEligible, Status: metav1.ConditionFalse, LastTransitionTime: now}
	if lifecycle.LostNode(r) && r.Status.State != nodusv1.ReservationStateActive {
		// Not the Placed message: the other reservation is another tenant's.
		c.Reason = string(apierror.ReasonNodeLost)
		c.Message = "this host's machine was taken out of the fleet while reserved and serves another reservation now; its access ended"
		return c
	}
	switch r.Status.State {
	case nodusv1.ReservationStateActive:
		c.Status, c.Reason = metav1.ConditionTrue, "WithinTerm"
		c.Message = "the term runs until " + r.Spec.EndsAt.UTC().Format(time.RFC3339)
	case nodusv1.ReservationStatePending:
		c.Reason, c.Message = "NotStarted", "the term starts at "+r.Spec.StartsAt.UTC().Format(time.RFC3339)
	case nodusv1.ReservationStateReleasing, nodusv1.ReservationStateReleased:
		c.Reason, c.Message = "Released", "the owner released this host's capacity"
	case nodusv1.ReservationStateEnding, nodusv1.ReservationStateEnded:
		if r.DeletionTimestamp != nil {
			c.Reason, c.Message = "TermEnded", "the reservation was deleted at "+r.DeletionTimestamp.UTC().Format(time.RFC3339)+": its access ended"
			break
		}
		fallthrough
	default:
		c.Reason, c.Message = "TermEnded", "the term ended at "+r.Spec.EndsAt.UTC().Format(time.RFC3339)
	}
	return c
}
