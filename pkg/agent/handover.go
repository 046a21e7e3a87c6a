package agent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// DefaultLoginGroup is the group of the login users Nodus manages, for
// which the sshd drop-in accepts Nodus certificates only.
const DefaultLoginGroup = "nodus-login"

// forgetAfter is how long a retired reservation's entry outlives it in the
// local state: long enough for its cleaning to find its login user.
const forgetAfter = 24 * time.Hour

// retire ends the access of a reservation that left this node (deleted,
// moved elsewhere, or released or ended: the server shows an agent only
// the reservations its node serves) as a release would: its principals go
// first, then its login user's processes; a heartbeat follows. The
// cleaning the server asks for next resets the account. uid is the
// object's, when known (not for a reservation the agent only has an entry
// of).
func (a *Agent) retire(ctx context.Context, reservation string, uid types.UID) {
	a.applying.Lock()
	defer a.applying.Unlock()
	before, retired, err := a.store.Retire(reservation, string(uid), 0, time.Now())
	if err != nil {
		applied, _, _ := a.store.Applied(reservation)
		a.unrecordable(ctx, state.Access{Reservation: reservation, LoginUser: applied.LoginUser, Epoch: applied.Epoch,
			State: string(nodusv1.ReservationStateReleased)}, fmt.Errorf("retiring access: %w", err))
		return
	}
	if !retired {
		return // the entry is of an object made later under the name: its own events govern it
	}
	a.setUnrecorded(reservation, false)
	klog.InfoS("retired access: the reservation ended or left this node", "reservation", reservation)
	// Only a login user's sessions: not a service's, whatever the server
	// named.
	if before.LoginUser != "" && !a.neverATenants(before.LoginUser) && !a.userStillGranted(before.LoginUser) {
		a.endTenancy(ctx, before.LoginUser)
	}
	a.beatSoon()
}

// endTenancy ends what a login user whose access ended for good runs now
// and what would run later: its crontab, at jobs and lingering (a cron job
// would start the tenant's code again every minute until the cleaning,
// which the server may ask for much later), its sessions, and what those
// scheduled again within their grace.
func (a *Agent) endTenancy(ctx context.Context, user string) {
	unschedule := a.mayUnschedule(user)
	if unschedule {
		a.unschedule(user)
	}
	a.endSessions(ctx, user)
	if unschedule {
		a.unschedule(user)
	}
}

// endSessions ends the sessions of a login user whose access ended. What
// it cannot show ended is logged, and counted in the next heartbeats (at
// least one session, reservationEvidence), which end them again.
func (a *Agent) endSessions(ctx context.Context, user string) {
	if err := a.procs.EndSessions(ctx, user, a.opts.Grace); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "ending the sessions of a login user whose access ended: the next heartbeat counts them and ends them again", "user", user)
	}
}

func (a *Agent) unschedule(user string) {
	if steps, err := a.cleaning.Unschedule(user); err != nil {
		// Its processes end all the same; the next sweep of its left
		// sessions tries again, and the cleaning fails on it.
		klog.ErrorS(err, "removing what the login user scheduled", "user", user)
	} else {
		klog.V(2).InfoS("removed what the login user scheduled", "user", user, "steps", steps)
	}
}

// mayUnschedule says whether what user scheduled may go for good: no
// access recorded here grants it, not even one withheld for a moment (an
// access not yet recorded, or refused), and an access here granted it once
// (a supplier's account is never a tenant's). When in doubt, it may not:
// the processes still end, and the cleaning removes the rest.
func (a *Agent) mayUnschedule(user string) bool {
	all, err := a.store.All()
	if err != nil {
		return false
	}
	for _, acc := range all {
		if acc.Granted() && acc.LoginUser == user && a.claimed(acc) {
			return false
		}
	}
	return a.everManaged(user)
}

// userStillGranted says whether another reservation's applied access lets
// user in: ending its processes would end that tenant's sessions. When the
// state database cannot tell, it keeps them: the principals are gone anyway.
func (a *Agent) userStillGranted(user string) bool {
	granted, err := a.grantedNow(user)
	return granted || err != nil
}

// grantedNow is userStillGranted with the state database's error, for the
// cleaning, which fails rather than pass over an account it cannot tell of.
func (a *Agent) grantedNow(user string) (bool, error) {
	all, err := a.store.All()
	if err != nil {
		return false, err
	}
	for _, acc := range all {
		if acc.Granted() && acc.LoginUser == user && !a.withheld(acc.Reservation) && a.claimed(acc) {
			return true, nil
		}
	}
	return false, nil
}

// everManaged says whether an access on this host may have used user, so
// that it has a tenant's leftovers to reset. Where this agent manages the
// login group (manageLoginUser puts every login user there before its
// first grant, for good), an account outside it never let a tenant in, or
// an access this agent recorded names it. Where it manages none, every
// account counts: the state database alone (wiped with a reinstall, its
// entries forgotten after a month) would let a tenant's account go
// uncleaned and the cleaning succeed.
func (a *Agent) everManaged(user string) bool {
	if a.opts.LoginGroup == "" || a.opts.SSHDDropIn == "" {
		return true
	}
	if in, err := a.inLoginGroup(user); err != nil || in {
		return true // when in doubt, clean: what is left of a tenant must go
	}
	all, err := a.store.All()
	if err != nil {
		return true
	}
	for _, acc := range all {
		if acc.LoginUser == user || slices.Contains(acc.FormerLoginUsers, user) {
			return true
		}
	}
	return false
}

// inLoginGroup says whether user is in the login group, by the groups'
// ids: `id -nG` fails on a group without a name (while it prints the
// others), and that failure, taken for doubt, made any such account a
// tenant's. No login group yet: no one is in it.
func (a *Agent) inLoginGroup(name string) (bool, error) {
	group, err := user.LookupGroup(a.opts.LoginGroup)
	if errors.As(err, new(user.UnknownGroupError)) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	u, err := a.lookupUser(name)
	if err != nil {
		return false, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false, err
	}
	return slices.Contains(gids, group.Gid), nil
}

// retiredLoginUser is the login user an access that lets no one in
// (desired) is recorded with, whose sessions end and whose account a
// cleaning after it resets: the one the server names, unless the agent
// manages the login group and that account is outside it and is no login
// user of the access as recorded. Such an account never let a tenant in
// (everManaged), and the server's word alone must not make it one: its
// processes would end at every beat, and a cleaning naming the
// reservation would reset its home. Then it is the login user recorded
// for the same reservation, or none.
func (a *Agent) retiredLoginUser(previous, desired state.Access) string {
	user := desired.LoginUser
	if user == "" || a.opts.LoginGroup == "" || a.opts.SSHDDropIn == "" {
		return user // without a login group every account counts (everManaged)
	}
	sameObject := previous.Reservation != "" && (previous.UID == "" || desired.UID == "" || previous.UID == desired.UID)
	if sameObject && (desired.Epoch <= previous.Epoch || previous.LoginUser == user || slices.Contains(previous.FormerLoginUsers, user)) {
		return user // not newer, so not applied; or a login user recorded
	}
	if in, err := a.inLoginGroup(user); err != nil || in {
		return user // when in doubt, as named: its sessions end
	}
	klog.InfoS("not taking a login user no access granted here for an access that lets no one in",
		"reservation", desired.Reservation, "user", user, "state", desired.State)
	if sameObject {
		return previous.LoginUser
	}
	return ""
}

// manageLoginUser puts user in the login group before any access is
// granted to it, so that sshd accepts only Nodus certificates for it: no
// key a tenant plants, no password. Users stay in the group for good.
func (a *Agent) manageLoginUser(user string) error {
	if err := a.refuseLoginUser(user); err != nil {
		return err
	}
	if a.opts.LoginGroup == "" || a.opts.SSHDDropIn == "" {
		return nil
	}
	if err := exec.Command("getent", "group", a.opts.LoginGroup).Run(); err != nil {
		if out, err := exec.Command("groupadd", "--system", a.opts.LoginGroup).CombinedOutput(); err != nil {
			return fmt.Errorf("groupadd %s: %v: %s", a.opts.LoginGroup, err, out)
		}
	}
	if in, err := a.inLoginGroup(user); err == nil && in {
		return nil
	}
	if out, err := exec.Command("usermod", "--append", "--groups", a.opts.LoginGroup, "--", user).CombinedOutput(); err != nil {
		return fmt.Errorf("adding %s to group %s: %v: %s", user, a.opts.LoginGroup, err, out)
	}
	return nil
}

// observeNode starts the cleaning the server asks for: one at a time, the
// newest request last. An agent restarted in the middle of a cleaning finds
// the request still pending on its node and does it again from the start.
func (a *Agent) observeNode(n *nodusv1.Node) {
	c := n.Status.Cleaning
	if c == nil || c.Phase != nodusv1.CleaningPending {
		a.mu.Lock()
		if a.evidence != nil && c != nil && c.Request >= a.evidence.Request {
			a.evidence = nil // recorded: stop reporting it
		}
		a.mu.Unlock()
		return
	}
	select {
	case a.cleanings <- c.DeepCopy():
	default:
		// The worker is busy; it reads the node again when done.
	}
}

// cleaner carries out cleaning requests until ctx ends.
func (a *Agent) cleaner(ctx context.Context, latest func() *nodusv1.Node) {
	done := int64(0)
	for {
		var req *nodusv1.NodeCleaning
		select {
		case <-ctx.Done():
			return
		case req = <-a.cleanings:
		}
		if n := latest(); n != nil && n.Status.Cleaning != nil {
			req = n.Status.Cleaning.DeepCopy() // the newest request wins
		}
		if req.Phase != nodusv1.CleaningPending || req.Request <= done {
			continue
		}
		ev := a.clean(ctx, req)
		if ctx.Err() != nil {
			return // stopped in the middle: the next start does it again, from the start
		}
		done = req.Request
		a.mu.Lock()
		a.evidence = ev
		a.mu.Unlock()
		a.beatSoon()
	}
}

// clean carries out one request: the reservation it follows is retired
// here first (at the server's final epoch), then every account it used,
// and every account of an access that owes a cleaning on the agent's own
// record (whatever the request names), is reset and the operator's command
// runs. Its success discharges what those accesses owe.
func (a *Agent) clean(ctx context.Context, req *nodusv1.NodeCleaning) *nodusv1.CleaningEvidence {
	users := slices.Clone(req.Users)
	applied := req.Epoch
	retiredHere := false
	if req.Reservation != "" {
		// With its UID, where the server names one that is one: a
		// reservation never applied here (nodusd was down through its
		// whole time) gets its entry from this retirement, and one made
		// again under its name must be told from it.
		uid := ""
		if sshvalue.CanonicalUID(req.ReservationUID) {
			uid = string(req.ReservationUID)
		}
		before, retired, err := a.store.Retire(req.Reservation, uid, req.Epoch, time.Now())
		if err != nil {
			// Refused in memory meanwhile; the cleaning fails, and the
			// node goes to maintenance rather than to the next tenant.
			a.setUnrecorded(req.Reservation, true)
			return &nodusv1.CleaningEvidence{Request: req.Request, Message: "recording the retirement: " + err.Error()}
		}
		// Every account it granted: one it left for another was reset then,
		// but that reset may have failed or been cut short by a restart.
		for _, u := range append(slices.Clone(before.FormerLoginUsers), before.LoginUser) {
			if u != "" && !slices.Contains(users, u) {
				users = append(users, u)
			}
		}
		applied = max(before.Epoch, req.Epoch)
		retiredHere = retired
	}
	// And every access that owes a cleaning, whatever the server names:
	// none other is granted until one succeeds (state.CleaningOwedError).
	owed, err := a.store.Owed()
	if err != nil {
		return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: "reading which accesses owe a cleaning: " + err.Error()}
	}
	// An entry the retirement left (an object made later under the name)
	// is discharged only if it owes a cleaning now, its accounts reset
	// below with the rest.
	var discharged []string
	if retiredHere {
		discharged = append(discharged, req.Reservation)
	}
	for _, o := range owed {
		if !slices.Contains(discharged, o.Reservation) {
			discharged = append(discharged, o.Reservation)
		}
		for _, u := range append(slices.Clone(o.FormerLoginUsers), o.LoginUser) {
			if u != "" && !slices.Contains(users, u) {
				users = append(users, u)
			}
		}
	}
	// Borrowers' executions ran under the reservation whose access ended:
	// none may outlive its cleaning into the next tenant's time. A deleted
	// or moved reservation's node comes here without drain evidence, while
	// the drain its retirement started may still be in its grace.
	if a.runner != nil && a.runner.Active() {
		a.runner.Drain(ctx, "the host was handed over: the access of the reservation that lent it ended")
		if a.runner.Active() {
			message := "borrowers' executions still run on the host"
			if _, err := a.runner.Running(); err != nil {
				message = "the borrowers' processes cannot be shown ended: " + err.Error()
			}
			return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: message}
		}
	}
	var keep, skipped []string
	granted := map[string][]string{}
	for _, u := range users {
		if err := a.refuseLoginUser(u); errors.Is(err, errAccountUnreadable) {
			// Perhaps a tenant's: not passed over as a service's.
			return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: "the cleaning cannot tell whether to reset " + u + ": " + err.Error()}
		} else if err != nil {
			// No tenant may be let in as it: nothing of a tenant to reset,
			// and a system account's home is a system directory. Unless it
			// was granted as one that could become root: its uid, the
			// system's range of people's uids and the agent's own
			// configuration are then the tenant's to change, and what it
			// could do with root is still on the host.
			klog.ErrorS(err, "not cleaning an account no tenant may use", "user", u)
			skipped = append(skipped, "left "+u+" alone: "+err.Error())
			ways, err := a.store.RootAccess(u)
			if err != nil {
				return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: "reading how " + u + " could become root: " + err.Error()}
			}
			if len(ways) > 0 {
				granted[u] = ways
			}
			continue
		}
		inUse, err := a.grantedNow(u)
		if err != nil {
			return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: "reading whether another access grants " + u + ": " + err.Error()}
		}
		if inUse {
			// Another reservation's tenant uses this account now; never reset it under them.
			klog.InfoS("not cleaning an account that is granted again", "user", u)
			continue
		}
		if !a.everManaged(u) {
			// The server names it, but no access here ever used it: an
			// account of the supplier's (a maintenance login), never a
			// tenant's. Emptying its home and ending its processes on the
			// server's word alone would be the server deciding for root.
			klog.InfoS("not cleaning an account no access here used", "user", u)
			skipped = append(skipped, "left "+u+" alone: no access on this host used it")
			continue
		}
		keep = append(keep, u)
	}
	for _, u := range keep {
		ways, err := a.store.RootAccess(u)
		if err != nil {
			return &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Message: "reading how " + u + " could become root: " + err.Error()}
		}
		granted[u] = ways
	}
	klog.InfoS("cleaning", "request", req.Request, "reservation", req.Reservation, "users", keep)
	r := a.cleaning.Clean(ctx, req.Request, keep, granted)
	if r.Err == nil {
		// Before the server hears of it, which then lets the next tenant
		// claim the host: what the accesses owed is discharged, and their
		// entries may go. Until then a cleaning asked again needs the
		// accounts they name.
		if err := a.store.MarkCleaned(discharged, time.Now()); err != nil {
			r.Err = fmt.Errorf("recording the cleaning in the state database: %w", err)
		}
	}
	if r.Err == nil {
		// Clean (with a command, for an account that could become root): the
		// next tenant's grant looks again at the host as it is then.
		for u := range granted {
			if err := a.store.ForgetRootAccess(u); err != nil {
				klog.ErrorS(err, "forgetting how a cleaned login user could become root", "user", u)
			}
		}
	}
	ev := &nodusv1.CleaningEvidence{Request: req.Request, AppliedEpoch: applied, Succeeded: r.Err == nil,
		Steps: append(r.Steps, skipped...), CommandExitCode: r.CommandExitCode, CommandOutput: fitOutput(r.CommandOutput)}
	if r.Err != nil {
		ev.Message = r.Err.Error()
		klog.ErrorS(r.Err, "cleaning failed", "request", req.Request)
	} else {
		klog.InfoS("cleaning done", "request", req.Request)
	}
	// Within what the server records (a heartbeat it refuses would not count
	// at all): the last steps, the accounts left alone among them.
	if len(ev.Steps) > validation.MaxCleaningSteps {
		ev.Steps = ev.Steps[len(ev.Steps)-validation.MaxCleaningSteps:]
	}
	for i := range ev.Steps {
		ev.Steps[i] = truncate(ev.Steps[i])
	}
	ev.Message = truncate(ev.Message)
	return ev
}

// fitOutput is the clean command's output tail as the server records it:
// control characters replaced, cut to its bound from the start.
func fitOutput(s string) string {
	s = validation.WithoutTerminalControls(s)
	for len(s) > validation.MaxCleaningOutput {
		_, size := utf8.DecodeRuneInString(s)
		s = s[size:]
	}
	return s
}

func truncate(s string) string {
	s = validation.WithoutTerminalControls(s)
	if len(s) <= validation.MaxCleaningText {
		return s
	}
	return strings.ToValidUTF8(s[:validation.MaxCleaningText], "")
}

func (a *Agent) beatSoon() {
	select {
	case a.beatNow <- struct{}{}:
	default:
	}
}

// current says whether reservation is one the agent sees on this node now.
func (a *Agent) current(reservation string) bool {
	if a.reservations == nil {
		return true
	}
	_, exists, err := a.reservations.GetByKey(reservation)
	return err != nil || exists
}

// final says whether reservation is released or ended as the agent sees
// it: the server saw that first, and its evidence no longer counts.
func (a *Agent) final(reservation string) bool {
	if a.reservations == nil {
		return false
	}
	obj, exists, err := a.reservations.GetByKey(reservation)
	return err == nil && exists && lifecycle.Final(obj.(*nodusv1.Reservation).Status.State)
}
