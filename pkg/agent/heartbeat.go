package agent

// The agent's heartbeat: what it reports of the access it applied, and the
// interval it keeps to. beatstream.go carries the beats to the server.

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// heartbeats reports at the server's interval, starting with a jittered
// beat, sooner when access was just applied, backing off on errors.
func (a *Agent) heartbeats(ctx context.Context) {
	wait := time.Duration(rand.Int64N(int64(time.Second)))
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-a.beatNow:
		}
		if err := a.beat(ctx); err != nil {
			klog.ErrorS(err, "heartbeat failed", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, a.currentInterval())
			continue
		}
		backoff = time.Second
		wait = a.currentInterval()
	}
}

func (a *Agent) beat(ctx context.Context) error {
	applied, err := a.store.All()
	if err != nil {
		return err
	}
	hb := nodusv1.NodeHeartbeat{AgentGeneration: a.id.AgentGeneration}
	a.mu.Lock()
	hb.Cleaning = a.evidence.DeepCopy()
	a.mu.Unlock()
	hb.Reservations = a.reservationEvidence(ctx, applied)
	hb.Reservations = a.withRefusals(hb.Reservations)
	answer, err := a.send(ctx, &hb)
	if err != nil {
		return err
	}
	a.heard(answer)
	if _, err := a.store.Forget(a.current, forgetAfter, time.Now()); err != nil {
		klog.ErrorS(err, "forgetting retired reservations")
	}
	return nil
}

// reservationEvidence is what a heartbeat says of the reservations applied
// here and on this node now: the epoch applied, the owner's sessions and
// the borrowers' processes left. It ends, in the background, the sessions
// of login users whose access is retired that it finds still running.
//
// A count the agent cannot make (the host's processes, or a user's
// subordinate uids, cannot be read) is reported as at least 1: the server
// completes a release or an end on a count of none, and a count it could
// not make must not be taken for that.
func (a *Agent) reservationEvidence(ctx context.Context, applied []state.Access) []nodusv1.ReservationEvidence {
	running, err := a.runner.Running()
	if err != nil {
		klog.ErrorS(err, "counting the borrowers' processes: reported as at least one until they can be counted")
		running = max(running, 1)
	}
	borrowers := int32(running)
	// An account the agent never grants has no tenant's sessions: its
	// processes are a service's, and must not hold a release up.
	sessionsOf := func(user string) int {
		if user == "" || a.neverATenants(user) {
			return 0
		}
		n, err := a.procs.Count(user)
		if err != nil {
			klog.ErrorS(err, "counting a login user's sessions: reported as at least one until they can be counted", "user", user)
			return max(n, 1)
		}
		return n
	}
	var evidence []nodusv1.ReservationEvidence
	for _, acc := range applied {
		current := a.current(acc.Reservation)
		// Whether or not the reservation is on this node still: sshd may
		// have let a login in on a principal it read just before the
		// access ended, whose first process runs after every sweep (its
		// PAM session takes seconds), and a deleted or moved reservation
		// has no release to wait for its sessions.
		sessions := 0
		if current || !acc.Granted() {
			sessions = sessionsOf(acc.LoginUser)
		}
		if sessions > 0 && !acc.Granted() {
			a.endLeftSessions(ctx, acc.LoginUser, applied, true)
		}
		for _, former := range acc.FormerLoginUsers {
			if sessionsOf(former) > 0 {
				a.endLeftSessions(ctx, former, applied, true)
			}
		}
		if !current {
			continue // only reservations on this node now are reported
		}
		if a.final(acc.Reservation) {
			// A server before session 52 lists a final reservation until it
			// is deleted: named in every beat, a long-lived node's beats
			// would grow past what the server takes.
			continue
		}
		evidence = append(evidence, nodusv1.ReservationEvidence{
			Name: acc.Reservation, AppliedEpoch: acc.Epoch, OwnerSessions: int32(sessions),
			BorrowerExecutions: borrowers,
		})
	}
	return evidence
}

// endLeftSessions ends, in the background, the processes of a login user
// whose access is retired, or whose term ended on this host (watchTerms),
// but who still runs some: the ending apply started was cut short (nodusd
// stopped within the grace period, and apply does not run again for an
// epoch already recorded), or a process outlived it. A user some access
// still grants is left alone; one ending per user at a time. A retired
// access's user also loses what it scheduled (endTenancy); a term that
// ended by this host's clock alone is not over until the server says so.
func (a *Agent) endLeftSessions(ctx context.Context, user string, applied []state.Access, retired bool) {
	if user == "" || a.neverATenants(user) ||
		slices.ContainsFunc(applied, func(acc state.Access) bool {
			return acc.Granted() && acc.LoginUser == user && !a.termEndedHere(acc.Reservation)
		}) {
		return
	}
	a.mu.Lock()
	if a.ending == nil {
		a.ending = map[string]bool{}
	}
	busy := a.ending[user]
	a.ending[user] = true
	a.mu.Unlock()
	if busy {
		return
	}
	klog.InfoS("ending the processes of a login user whose access is retired", "user", user)
	go func() {
		if retired {
			// What the cut-short retirement did not unschedule goes too.
			a.endTenancy(ctx, user)
		} else {
			a.endSessions(ctx, user)
		}
		a.mu.Lock()
		delete(a.ending, user)
		a.mu.Unlock()
		a.beatSoon()
	}()
}

// heard takes the interval of the server's answer to a beat, within the
// bound a server may set: a beat is also when the agent ends the late
// sessions of an access that ended, which a longer interval would put off.
func (a *Agent) heard(answer *nodusv1.NodeHeartbeat) {
	if answer.IntervalSeconds <= 0 {
		return
	}
	a.mu.Lock()
	a.interval = time.Duration(min(answer.IntervalSeconds, nodusv1.MaxHeartbeatIntervalSeconds)) * time.Second
	a.mu.Unlock()
}

func (a *Agent) currentInterval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.interval
}
