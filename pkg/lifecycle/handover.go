// Package lifecycle is the one state machine of a reservation and its
// node's tenancy, as pure functions of (reservation, node, evidence, now):
// activation, reassignment, term end (Advance), the owner's release, lend
// and withdraw (Release, Lend, Withdraw), the drain an agent's evidence
// completes (Drain), which reservation may claim a node (ClaimBlocker,
// Claim), how a node is handed over to cleaning when a reservation's access
// ends (Handover, Reclean), and what an agent's cleaning evidence changes
// (RecordCleaning). The reservation controller, the REST actions and the
// heartbeat handler call it; none of them decides these things on its own.
package lifecycle

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Final says whether a reservation in state s is over: its node is no
// longer its own and goes to cleaning.
func Final(s nodusv1.ReservationState) bool {
	return s == nodusv1.ReservationStateReleased || s == nodusv1.ReservationStateEnded
}

// Blocker is why a reservation cannot claim its node now; it becomes the
// reason of the reservation's Placed condition.
type Blocker struct {
	Reason  metav1.StatusReason
	Message string
}

// ClaimBlocker says why reservation r may not claim node, or nil when it
// may (or already holds it). A node claimed by the reservation stays its own
// whatever the node's state: maintenance never evicts a tenant.
func ClaimBlocker(r *nodusv1.Reservation, nodeName string, node *nodusv1.Node) *Blocker {
	switch {
	case node == nil:
		return &Blocker{apierror.ReasonNodeNotFound, fmt.Sprintf("node %s does not exist", nodeName)}
	case Holds(r, node):
		return nil
	case node.Status.Reservation == r.Name:
		return &Blocker{apierror.ReasonNodeReserved, fmt.Sprintf("node %s is held by an earlier reservation named %s, deleted since; it is cleaned before this one's access",
			node.Name, r.Name)}
	case node.Status.Reservation != "":
		return &Blocker{apierror.ReasonNodeReserved, fmt.Sprintf("node %s is held by reservation %s", node.Name, node.Status.Reservation)}
	case node.Status.Allocation != "" && node.Status.Allocation != AllocationName(r):
		// An Ironic client's allocation, or another reservation's: its
		// owner believes the node its own.
		return &Blocker{apierror.ReasonNodeAllocated, fmt.Sprintf("node %s is held by allocation %s", node.Name, node.Status.Allocation)}
	case OwesCleaning(node):
		return &Blocker{apierror.ReasonNodeCleaning, CleaningOwed(node)}
	case node.Spec.Maintenance:
		msg := fmt.Sprintf("node %s is in maintenance", node.Name)
		if node.Spec.MaintenanceReason != "" {
			msg += ": " + node.Spec.MaintenanceReason
		}
		return &Blocker{apierror.ReasonNodeInMaintenance, msg}
	}
	return nil
}

// OwesCleaning says whether node is being cleaned after a tenant, or its
// last cleaning did not succeed: either way no one may claim it. The
// cleaning's own record counts beside the provision state, which only a
// succeeded cleaning moves on, so that a status write that set the node
// available by hand (an operator's, a tool's) hands on no uncleaned node.
func OwesCleaning(node *nodusv1.Node) bool {
	c := node.Status.Cleaning
	return node.Status.ProvisionState == nodusv1.ProvisionStateCleaning || (c != nil && c.Phase != nodusv1.CleaningSucceeded)
}

// CleaningOwed says why no one may claim node, which OwesCleaning: its
// cleaning goes on, or it failed and the node waits for an operator. Not
// with the agent's message of a failure: it names what the previous tenant
// left, and the next tenant may read this one.
func CleaningOwed(node *nodusv1.Node) string {
	if c := node.Status.Cleaning; c != nil && c.Phase == nodusv1.CleaningFailed {
		return fmt.Sprintf("node %s's cleaning after its previous tenant failed (cleaning request %d); "+
			"it waits for an operator to clean it again (`nodus nodes clean %s`, then `nodus nodes maintenance %s off`)",
			node.Name, c.Request, node.Name, node.Name)
	}
	return fmt.Sprintf("node %s is being cleaned after its previous tenant (cleaning request %d)", node.Name, cleaningRequest(node))
}

// AllocationName is the Allocation reservation r uses: the one it names,
// or the one the reservation controller makes for a resource-class
// placement; "" for a placement by node.
func AllocationName(r *nodusv1.Reservation) string {
	if r.Spec.Placement.Allocation != "" {
		return r.Spec.Placement.Allocation
	}
	if r.Spec.Placement.ResourceClass != "" {
		return "reservation-" + r.Name
	}
	return ""
}

// Holds says whether node's claim is reservation r's: its name and UID. A
// claim under r's name with another UID is an earlier reservation's, deleted
// and r made under its name before its claim was handed over; its tenant's
// access is cleaned from the node before r may have it. A claim without a
// UID (written before claims carried one) is r's only on the node r was
// given.
func Holds(r *nodusv1.Reservation, node *nodusv1.Node) bool {
	s := &node.Status
	switch {
	case s.Reservation != r.Name:
		return false
	case s.ReservationUID == r.UID:
		return true
	}
	return s.ReservationUID == "" && r.Status.Node == node.Name
}

func cleaningRequest(n *nodusv1.Node) int64 {
	if n.Status.Cleaning == nil {
		return 0
	}
	return n.Status.Cleaning.Request
}

// Claim is node's status once reservation r holds it. The caller writes it
// under the resourceVersion it read: of two claims, only one can succeed.
//
// What the node says of the tenant before goes: r's tenant, root on the
// host, can read the node with its agent's credential. Of the last
// cleaning, a success (a claim waits for one) keeps its request, times and
// outcome, not the reservation it followed, its epoch, the login users,
// the steps or the clean command's output; the server logged them when the
// agent reported (docs/handover.md). An access refusal is about another
// reservation.
func Claim(node *nodusv1.Node, r *nodusv1.Reservation) *nodusv1.Node {
	next := node.DeepCopy()
	next.Status.Reservation, next.Status.ReservationUID = r.Name, r.UID
	next.Status.ProvisionState = nodusv1.ProvisionStateActive
	if c := next.Status.Cleaning; c != nil && c.Phase == nodusv1.CleaningSucceeded {
		c.Reservation, c.ReservationUID, c.Epoch, c.Users, c.Steps, c.Message, c.CommandOutput = "", "", 0, nil, nil, "", ""
	}
	if a := next.Status.AccessRefusal; a != nil && a.ReservationUID != r.UID {
		next.Status.AccessRefusal = nil
	}
	return next
}

// Handover is node's status once the reservation that held it let go: the
// claim is gone and a new cleaning is asked for, of the reservation's login
// users, after its final epoch (0 when the reservation no longer exists).
func Handover(node *nodusv1.Node, reservation string, epoch int64, users []string, now time.Time) *nodusv1.Node {
	next := node.DeepCopy()
	next.Status.Reservation, next.Status.ReservationUID = "", ""
	next.Status.ProvisionState = nodusv1.ProvisionStateCleaning
	next.Status.Cleaning = newCleaning(node, reservation, epoch, users, now)
	if reservation != "" && node.Status.Reservation == reservation {
		next.Status.Cleaning.ReservationUID = node.Status.ReservationUID
	}
	return next
}

// Reclean is node's status when an operator asks for its cleaning again.
// A reserved node is refused: its tenant still has access.
func Reclean(node *nodusv1.Node, now time.Time) (*nodusv1.Node, *Blocker) {
	if node.Status.Reservation != "" {
		return nil, &Blocker{apierror.ReasonNodeReserved,
			fmt.Sprintf("node %s is held by reservation %s; it is cleaned when that reservation's access ends", node.Name, node.Status.Reservation)}
	}
	var users []string
	reservation, epoch, uid := "", int64(0), types.UID("")
	if c := node.Status.Cleaning; c != nil {
		users, reservation, epoch, uid = c.Users, c.Reservation, c.Epoch, c.ReservationUID
	}
	next := Handover(node, reservation, epoch, users, now)
	next.Status.Cleaning.ReservationUID = uid
	return next, nil
}

func newCleaning(node *nodusv1.Node, reservation string, epoch int64, users []string, now time.Time) *nodusv1.NodeCleaning {
	set := []string{}
	for _, u := range append(slices.Clone(users), node.Spec.LoginUser) {
		if u != "" && !slices.Contains(set, u) {
			set = append(set, u)
		}
	}
	slices.Sort(set)
	return &nodusv1.NodeCleaning{
		Request: cleaningRequest(node) + 1, Reservation: reservation, Epoch: epoch, Users: set,
		RequestedAt: metav1.NewTime(now.Truncate(time.Second)), Phase: nodusv1.CleaningPending,
	}
}

// CleaningOutcome is what an agent's cleaning evidence changes on its node.
type CleaningOutcome struct {
	// Node is the node's next status; nil when the evidence changes nothing
	// (not the current request, already recorded, or a success from before
	// the retirement it follows).
	Node *nodusv1.Node
	// Maintenance, when set, is the reason to put the node in maintenance:
	// a failed cleaning never makes a node available.
	Maintenance string
}

// RecordCleaning applies cleaning evidence from the node's current agent
// generation (the caller checked it) to node.
func RecordCleaning(node *nodusv1.Node, ev nodusv1.CleaningEvidence, generation int64, now time.Time) CleaningOutcome {
	c := node.Status.Cleaning
	// A success counts only at or after the final epoch; a failure of the
	// current request fails it whatever epoch it names (one whose agent
	// could not record the retirement names none, and never reports
	// again): failing costs the next tenant nothing but a re-clean.
	succeeded := ev.Succeeded && (ev.CommandExitCode == nil || *ev.CommandExitCode == 0)
	if c == nil || ev.Request != c.Request || (succeeded && ev.AppliedEpoch < c.Epoch) {
		return CleaningOutcome{}
	}
	if c.Phase != nodusv1.CleaningPending {
		// Recorded already; a failed one still owes its maintenance (a
		// write after the status write may have been lost).
		if c.Phase == nodusv1.CleaningFailed && !node.Spec.Maintenance {
			return CleaningOutcome{Maintenance: MaintenanceReason(c)}
		}
		return CleaningOutcome{}
	}
	next := node.DeepCopy()
	done := next.Status.Cleaning
	at := metav1.NewTime(now.Truncate(time.Second))
	done.CompletedAt, done.AgentGeneration = &at, generation
	done.Steps, done.Message, done.CommandExitCode, done.CommandOutput = ev.Steps, ev.Message, ev.CommandExitCode, ev.CommandOutput
	out := CleaningOutcome{Node: next}
	if succeeded {
		done.Phase = nodusv1.CleaningSucceeded
		if next.Status.ProvisionState == nodusv1.ProvisionStateCleaning {
			next.Status.ProvisionState = nodusv1.ProvisionStateAvailable
		}
	} else {
		done.Phase = nodusv1.CleaningFailed
		if ev.Succeeded && done.Message == "" {
			done.Message = fmt.Sprintf("reported as succeeded, but the clean command exited %d", *ev.CommandExitCode)
		}
		out.Maintenance = MaintenanceReason(done)
	}
	return out
}

// maxMaintenanceReason is the most bytes of a failed cleaning's message the
// node's maintenance reason keeps.
const maxMaintenanceReason = 200

// MaintenanceReason is the node's maintenance reason after a failed cleaning.
func MaintenanceReason(c *nodusv1.NodeCleaning) string {
	msg := fmt.Sprintf("cleaning request %d failed", c.Request)
	if c.Message != "" {
		msg += ": " + c.Message
	}
	if len(msg) > maxMaintenanceReason {
		// Whole characters only: the agent's message may be any UTF-8.
		cut := maxMaintenanceReason
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	return msg
}
