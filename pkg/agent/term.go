package agent

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// termOver says whether r's term has ended by this host's clock while r
// still shows it active: the server's controller ends it (a new epoch),
// but a host cut off from the server then, or a server without a leading
// replica then, would keep the tenant in.
func termOver(r *nodusv1.Reservation, now time.Time) bool {
	return r.Status.State == nodusv1.ReservationStateActive && !r.Spec.EndsAt.IsZero() && !now.Before(r.Spec.EndsAt.Time)
}

// watchTerms ends, every second, the access of reservations whose term
// ended by this host's clock before the server ended it: their principals
// are withheld (as the certificates, valid until the term's end, expire),
// their login user's processes end and borrowers' executions drain. An
// operator's extension of the term, once seen, serves the principal again.
// It only ever shortens access: nothing of it needs the server's word.
func (a *Agent) watchTerms(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		a.endTerms(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) endTerms(ctx context.Context, now time.Time) {
	seen := map[string]bool{}
	for _, obj := range a.reservations.List() {
		r := obj.(*nodusv1.Reservation)
		seen[r.Name] = true
		over := termOver(r, now)
		a.mu.Lock()
		was := a.termEnded[r.Name]
		if over {
			a.termEnded[r.Name] = true
		} else {
			delete(a.termEnded, r.Name)
		}
		a.mu.Unlock()
		if !over {
			continue
		}
		login := r.Status.LoginUser
		if login == "" {
			login = r.Spec.LoginUser
		}
		if was {
			// A login sshd let in on a principal it read just before the
			// end starts its first process after that: ended as it comes,
			// for as long as the server has not ended the term.
			if login == "" {
				continue
			}
			// A count that failed may hide such a login: ended all the same.
			if n, err := a.procs.Count(login); n > 0 || err != nil {
				if applied, err := a.store.All(); err == nil {
					a.endLeftSessions(ctx, login, applied, false)
				}
			}
			continue
		}
		klog.InfoS("the term ended by this host's clock before the server ended it: access ends here now", "reservation", r.Name, "endsAt", r.Spec.EndsAt.UTC())
		if login != "" && !a.neverATenants(login) && !a.userStillGranted(login) {
			a.endSessions(ctx, login)
		}
		if lending.Lent(r) && a.runner != nil {
			a.runner.StartDrain(ctx, "the term of the host's reservation ended")
		}
	}
	a.mu.Lock()
	for name := range a.termEnded {
		if !seen[name] {
			delete(a.termEnded, name)
		}
	}
	a.mu.Unlock()
}
