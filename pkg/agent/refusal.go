package agent

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// refusal is an access the agent does not grant: the reservation's epoch,
// and why, as the server takes it (one line, validation.MaxRefusalText).
type refusal struct {
	uid   types.UID
	epoch int64
	why   string
}

// refuse records that the agent does not grant reservation's access (its
// login user) at epoch, and, when that is news, logs it, with logged's
// keys and values, and has the next heartbeat say so soon. err's text is
// the refusal's, which the reservation's tenant is shown.
func (a *Agent) refuse(reservation string, uid types.UID, user string, epoch int64, err error, logged ...any) {
	r := refusal{uid: uid, epoch: epoch, why: refusalText(err.Error())}
	a.mu.Lock()
	news := a.refusals[reservation] != r
	a.refusals[reservation] = r
	a.mu.Unlock()
	if news {
		klog.ErrorS(err, "access not applied", append([]any{"reservation", reservation, "user", user, "epoch", epoch}, logged...)...)
		a.beatSoon()
	}
}

// owedRefusal is the refusal a state database's CleaningOwedError stands
// for, in its tenant's words, and what to log beside them; ok is false for
// any other error.
func owedRefusal(err error) (refusal error, logged []any, ok bool) {
	var owed *state.CleaningOwedError
	if !errors.As(err, &owed) {
		return nil, nil, false
	}
	return errHostOwesCleaning, []any{"owedBy", owed.Reservation}, true
}

// errHostOwesCleaning refuses an access while another reservation's, or
// another object's of the same name, owes a cleaning
// (state.CleaningOwedError), in words its tenant may read: not the other
// reservation's name.
var errHostOwesCleaning = errors.New("no cleaning succeeded on this host since an earlier tenant's access: nodusd lets no one else in until one does (tell the operator: the node needs a cleaning)")

// retryRefusalsEvery is how often the refused reservations are applied again.
const retryRefusalsEvery = 10 * time.Second

// retryRefusals applies again, every retryRefusalsEvery until ctx ends,
// the reservations whose access the agent refused: what refused it (an
// account missing, a usermod that failed) may have been put right on the
// host since, and nothing else applies a reservation again until it
// changes. On a goroutine of its own: an apply that then succeeds may
// reset the previous login user's account, which takes what it takes,
// and the heartbeats must not wait for it.
func (a *Agent) retryRefusals(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryRefusalsEvery):
		}
		if a.reservations == nil {
			continue
		}
		a.mu.Lock()
		names := slices.Sorted(maps.Keys(a.refusals))
		a.mu.Unlock()
		for _, name := range names {
			obj, exists, err := a.reservations.GetByKey(name)
			if err != nil || !exists || ctx.Err() != nil {
				continue
			}
			a.apply(ctx, obj.(*nodusv1.Reservation))
		}
	}
}

// withRefusals adds the refusals of reservations on this node to
// evidence: beside a reservation's evidence when it has some (an access it
// granted before, at a lower epoch, or of another object of the name),
// else as evidence of its own with nothing applied. A reservation no
// longer here leaves its refusal.
func (a *Agent) withRefusals(evidence []nodusv1.ReservationEvidence) []nodusv1.ReservationEvidence {
	a.mu.Lock()
	names := slices.Sorted(maps.Keys(a.refusals))
	a.mu.Unlock()
	for _, name := range names {
		if !a.current(name) {
			a.mu.Lock()
			delete(a.refusals, name)
			a.mu.Unlock()
			continue
		}
		a.mu.Lock()
		r, ok := a.refusals[name]
		a.mu.Unlock()
		if !ok {
			continue
		}
		i := slices.IndexFunc(evidence, func(e nodusv1.ReservationEvidence) bool { return e.Name == name })
		switch {
		case i >= 0 && (evidence[i].AppliedEpoch < r.epoch || a.appliedAnother(name, r.uid)):
			evidence[i].RefusedEpoch, evidence[i].Refusal, evidence[i].RefusedUID = r.epoch, r.why, r.uid
		case i < 0 && len(evidence) < validation.MaxHeartbeatReservations:
			evidence = append(evidence, nodusv1.ReservationEvidence{Name: name, RefusedEpoch: r.epoch, Refusal: r.why, RefusedUID: r.uid})
		}
	}
	return evidence
}

// appliedAnother says whether the access recorded under name is of
// another object than uid (one the server deleted, whose entry a cleaning
// owed stops a namesake from replacing): its epoch says nothing of uid's.
func (a *Agent) appliedAnother(name string, uid types.UID) bool {
	acc, ok, err := a.store.Applied(name)
	return err == nil && ok && acc.UID != "" && uid != "" && acc.UID != string(uid)
}

// refusalText is s as one line of at most validation.MaxRefusalText bytes,
// without control characters: what the server takes and shows the tenant.
func refusalText(s string) string {
	s = strings.Map(func(r rune) rune {
		if validation.NotInALine(r) {
			return ' '
		}
		return r
	}, validation.WithoutTerminalControls(s))
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		s = "refused"
	}
	for len(s) > validation.MaxRefusalText {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
