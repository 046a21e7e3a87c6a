package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// CheckOwnerChange says why the owner may not change res's access (release,
// lend, withdraw) under the epoch it reviewed, at now; nil when it may.
func CheckOwnerChange(ctx context.Context, res *nodusv1.Reservation, epoch int64, now time.Time) error {
	gr, name := nodusv1.Resource("reservedhosts"), res.Name
	switch state := res.Status.State; {
	case state == nodusv1.ReservationStateReleasing || state == nodusv1.ReservationStateReleased:
		at := ""
		if res.Status.Release != nil {
			at = " at " + res.Status.Release.RequestedAt.UTC().Format(time.RFC3339)
		}
		return apierror.New(ctx, apierror.ReasonAlreadyReleased, gr, name, fmt.Sprintf("reservedhost %q was already released%s", name, at), "")
	case state == nodusv1.ReservationStateEnding || state == nodusv1.ReservationStateEnded || res.DeletionTimestamp != nil:
		return termEnded(ctx, res)
	case state == nodusv1.ReservationStatePending || state == "":
		return apierror.New(ctx, apierror.ReasonReservationNotActive, gr, name,
			fmt.Sprintf("reservedhost %q is pending: its term starts at %s", name, res.Spec.StartsAt.UTC().Format(time.RFC3339)), "")
	}
	if !now.Before(res.Spec.EndsAt.Time) {
		return termEnded(ctx, res)
	}
	if epoch != res.Status.Epoch {
		err := apierror.New(ctx, apierror.ReasonEpochConflict, gr, name,
			fmt.Sprintf("epoch %d is not current: reservedhost %q is at epoch %d", epoch, name, res.Status.Epoch), "")
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{
			Type: "CurrentEpoch", Field: "status.reservation.epoch", Message: fmt.Sprint(res.Status.Epoch),
		}}
		return err
	}
	return nil
}

func termEnded(ctx context.Context, res *nodusv1.Reservation) error {
	return apierror.New(ctx, apierror.ReasonTermEnded, nodusv1.Resource("reservedhosts"), res.Name, TermEndedMessage(res), "")
}

// TermEndedMessage says how res's access ended, its term over or the
// reservation deleted.
func TermEndedMessage(res *nodusv1.Reservation) string {
	if res.DeletionTimestamp != nil {
		return fmt.Sprintf("reservedhost %q was deleted at %s: its access ended", res.Name, res.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the term of reservedhost %q ended at %s", res.Name, res.Spec.EndsAt.UTC().Format(time.RFC3339))
}

// Release retires the owner's access to res for good (CheckOwnerChange
// allowed it): releasing, at a new epoch, requested now by fieldManager.
func Release(res *nodusv1.Reservation, fieldManager string, now time.Time) {
	res.Status.State = nodusv1.ReservationStateReleasing
	res.Status.Epoch++
	res.Status.Release = &nodusv1.ReservedHostReleaseStatus{RequestedAt: metav1.NewTime(now.Truncate(time.Second))}
	res.Status.ReleaseFieldManager = fieldManager
}

// Drain applies an agent's evidence for res on node (from the node's current
// agent generation; the caller checked it): a releasing or ending
// reservation on that node whose current epoch the agent applied, with no
// owner session and no borrower execution left, is released or ended. One
// ending because another reservation holds its node (NodeLost) ends once
// the agent applied its epoch: the sessions and executions the agent counts
// there are the other reservation's too (an account both use), and the
// retirement the agent applied ended all of the account's. It reports
// whether res changed.
func Drain(res *nodusv1.Reservation, node string, e nodusv1.ReservationEvidence, now time.Time) bool {
	if res.Status.Node != node || e.AppliedEpoch != res.Status.Epoch {
		return false
	}
	if (e.OwnerSessions != 0 || e.BorrowerExecutions != 0) && !LostNode(res) {
		return false
	}
	at := metav1.NewTime(now.Truncate(time.Second))
	switch {
	case res.Status.State == nodusv1.ReservationStateReleasing && res.Status.Release != nil:
		res.Status.State = nodusv1.ReservationStateReleased
		res.Status.Release.DrainedAt = &at
	case res.Status.State == nodusv1.ReservationStateEnding:
		res.Status.State = nodusv1.ReservationStateEnded
		res.Status.EndedAt = &at
	default:
		return false
	}
	return true
}

// LostNode says whether res's access ended because another reservation
// holds its node: its Placed condition says so (Advance's NodeLost).
func LostNode(res *nodusv1.Reservation) bool {
	c := meta.FindStatusCondition(res.Status.Conditions, "Placed")
	return c != nil && c.Reason == string(apierror.ReasonNodeLost)
}

// Lend records the owner's lending agreement on res (CheckOwnerChange
// allowed it), under the epoch it reviewed. Lending never changes the
// epoch: it changes who else runs on the host, not the owner's access.
func Lend(res *nodusv1.Reservation, agreement *nodusv1.ReservationLending, epoch int64, now time.Time) {
	a := agreement.DeepCopy()
	a.Lent, a.Epoch, a.ChangedAt = true, epoch, metav1.NewTime(now.Truncate(time.Second))
	res.Status.Lending = a
}

// Withdraw ends the lending of res; the scheduler and the host's agent
// drain what borrowers run. Withdrawing what is not lent changes nothing.
func Withdraw(res *nodusv1.Reservation, epoch int64, now time.Time) bool {
	if res.Status.Lending == nil || !res.Status.Lending.Lent {
		return false
	}
	res.Status.Lending.Lent = false
	res.Status.Lending.Epoch, res.Status.Lending.ChangedAt = epoch, metav1.NewTime(now.Truncate(time.Second))
	return true
}

// RememberRequest adds the request key of an owner's change to keys, the
// newest last, keeping at most limit of them.
func RememberRequest(keys []string, key string, limit int) []string {
	keys = append(slices.Clone(keys), key)
	if len(keys) > limit {
		keys = keys[len(keys)-limit:]
	}
	return keys
}
