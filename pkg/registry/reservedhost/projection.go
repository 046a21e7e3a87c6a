package reservedhost

import (
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ApplyReservation copies into host what the customer may see of its
// reservation: the term, login user, epoch, state and release.
func ApplyReservation(host *nodusv1.ReservedHost, r *nodusv1.Reservation) {
	loginUser := r.Status.LoginUser
	if loginUser == "" {
		loginUser = r.Spec.LoginUser
	}
	host.Status.Reservation = nodusv1.HostReservation{
		Project:   r.Spec.Project,
		StartsAt:  r.Spec.StartsAt,
		EndsAt:    r.Spec.EndsAt,
		LoginUser: loginUser,
		Epoch:     r.Status.Epoch,
		State:     r.Status.State,
	}
	if host.Status.Reservation.State == "" {
		host.Status.Reservation.State = nodusv1.ReservationStatePending
	}
	host.Status.Release = r.Status.Release.DeepCopy()
	if host.Status.Connect != nil {
		host.Status.Connect.LoginUser = loginUser
	}
}
