package lifecycle

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Placement is what a reservation's placement resolves to now.
type Placement struct {
	// Node is the node's name, "" while none is placed (an allocation still allocating).
	Node string
	// Target is that node as observed; nil when it does not exist.
	Target *nodusv1.Node
	// LoginUser is the account access is for: the reservation's, else the node's.
	LoginUser string
}

// Step is the next state of a reservation, as Advance decides it.
type Step struct {
	// Status is the next status (a copy; equal to the old one when nothing changes).
	Status *nodusv1.ReservationStatus
	// Claim, when set, is the target node with the reservation's claim: it is
	// written (by optimistic concurrency) before anything else, and the
	// reservation is advanced again once it is in the store.
	Claim *nodusv1.Node
	// Blocker says why the reservation cannot claim its placement's node.
	Blocker *Blocker
	// Handovers are the held nodes the reservation lets go, each with a
	// cleaning request, written after the status.
	Handovers []*nodusv1.Node
	// ReleaseAllocation: the reservation is over; its allocation goes.
	ReleaseAllocation bool
	// Requeue is when to look again (0: on the next event only).
	Requeue time.Duration
	// LostNode names the node an active reservation ends on because another
	// reservation holds it now. The caller reads that node from the store
	// before it writes the step: a cache may lag a claim of the
	// reservation's own, and the step ends a paying tenant's access.
	LostNode string
}

// Advance is a reservation's lifecycle as a function of (reservation, the
// node its placement resolves to, the nodes it holds, its project's access
// revision, now). The epoch rises on every access change — activation,
// login-user change, reassignment to another node, term end (or deletion), a member of
// the project losing SSH access (projectAccess moving on; a release is
// Release) — and never otherwise. No access is given on a node before the
// reservation's claim on it is in the store; a node the reservation no
// longer uses is handed over to cleaning.
func Advance(r *nodusv1.Reservation, p Placement, held []*nodusv1.Node, projectAccess int64, now time.Time) Step {
	st := r.Status.DeepCopy()
	step := Step{Status: st}
	claimed := func() bool {
		if step.Blocker = ClaimBlocker(r, p.Node, p.Target); step.Blocker != nil {
			return false
		}
		if p.Target.Status.Reservation != r.Name {
			step.Claim = Claim(p.Target, r)
			return false
		}
		return true
	}

	switch st.State {
	case "", nodusv1.ReservationStatePending:
		st.State = nodusv1.ReservationStatePending
		switch {
		case !now.Before(r.Spec.EndsAt.Time) || r.DeletionTimestamp != nil:
			// The term passed, or the reservation was deleted (a finalizer
			// keeps the object), before it ever gave access: nothing to retire.
			st.State = nodusv1.ReservationStateEnded
			st.EndedAt = &metav1.Time{Time: now}
		case now.Before(r.Spec.StartsAt.Time):
			step.Requeue = r.Spec.StartsAt.Sub(now)
		// (An unknown node is said as such, not as an unknown login user.)
		case p.Node != "" && (p.LoginUser != "" || p.Target == nil) && claimed():
			st.State = nodusv1.ReservationStateActive
			st.Epoch++
			st.Node, st.LoginUser = p.Node, p.LoginUser
			step.Requeue = r.Spec.EndsAt.Sub(now)
		}
	case nodusv1.ReservationStateActive:
		step.Requeue = r.Spec.EndsAt.Sub(now)
		switch {
		case !now.Before(r.Spec.EndsAt.Time) || r.DeletionTimestamp != nil:
			// A deletion a finalizer holds ends access as the term's end
			// does: the object stays, the access does not.
			st.State = nodusv1.ReservationStateEnding
			st.Epoch++
			step.Requeue = 0
		case p.Node != "" && p.Node != st.Node:
			if claimed() {
				st.Epoch++
				st.Node, st.LoginUser = p.Node, p.LoginUser
			}
		case p.Target != nil && p.Target.Name == st.Node && p.Target.Status.Reservation != "" && !Holds(r, p.Target):
			// Another reservation holds its node: the node was deleted while
			// held (the operator's nodus.dev/delete-uncleaned), and the
			// machine enrolled under its name was claimed by another first.
			// A node has one tenant: access here ends as at the term's end.
			st.State = nodusv1.ReservationStateEnding
			st.Epoch++
			step.Requeue = 0
			step.LostNode = st.Node
			step.Blocker = &Blocker{apierror.ReasonNodeLost, fmt.Sprintf("node %s was deleted while this reservation held it, and is held by reservation %s now; this reservation's access there ended",
				st.Node, p.Target.Status.Reservation)}
		case p.LoginUser != "" && p.LoginUser != st.LoginUser:
			st.Epoch++
			st.LoginUser = p.LoginUser
		case p.Target != nil && p.Target.Status.Reservation == "":
			// Active on a node without its claim (written before claims
			// existed): take it now, so that nobody else can.
			claimed()
		case p.Target != nil && p.Target.Name == st.Node && Holds(r, p.Target) && p.Target.Status.ReservationUID != r.UID:
			// Its claim, written before claims carried a UID: the UID is
			// written in, so that no later reservation of the name is taken
			// for this one.
			step.Claim = Claim(p.Target, r)
		}
	case nodusv1.ReservationStateReleased, nodusv1.ReservationStateEnded:
		step.ReleaseAllocation = true
	}
	if projectAccess != st.ProjectAccessRevision && step.Claim == nil {
		// Someone lost SSH access to the project: an active reservation's
		// epoch rises once for it (unless it rose in this step anyway), so
		// that no certificate issued before matches. Any other state
		// records the revision: no certificate is issued before activation,
		// whose epoch rises, nor after access ends.
		if st.State == nodusv1.ReservationStateActive && r.Status.State == nodusv1.ReservationStateActive && st.Epoch == r.Status.Epoch {
			st.Epoch++
		}
		st.ProjectAccessRevision = projectAccess
	}
	for _, n := range held {
		if !keeps(st, n.Name, p.Node) {
			step.Handovers = append(step.Handovers, Handover(n, r.Name, st.Epoch, []string{st.LoginUser, r.Spec.LoginUser}, now))
		}
	}
	return step
}

// keeps says whether a reservation in status st still holds node: its own
// node while it is not over, or, before it activated, the node it claimed.
func keeps(st *nodusv1.ReservationStatus, node, placed string) bool {
	switch {
	case Final(st.State):
		return false
	case st.Node == "":
		return node == placed
	}
	return node == st.Node
}
