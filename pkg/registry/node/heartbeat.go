package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/liveness"
)

// HeartbeatREST serves POST nodes/{name}/heartbeat, the agent's report.
// Liveness costs an etcd lease keep-alive; the Node is written only when
// something in it changes (readiness, applied epoch, refusal, cleaning),
// with the beat's time as its lastHeartbeatTime. A Ready node's beats
// that change nothing write nothing: its lease says it beats, and the
// liveness controller records its last beat when the lease expires. A
// report is evidence only from the node's current agent generation, and
// per reservation only at the reservation's current epoch.
type HeartbeatREST struct {
	Nodes        *genericregistry.Store // nodes/status
	NodeSpecs    *genericregistry.Store // nodes, for the maintenance a failed cleaning sets
	Reservations *genericregistry.Store // reservations/status
	Liveness     *liveness.Tracker
	Interval     time.Duration
	Now          func() time.Time
}

var (
	_ rest.NamedCreater    = &HeartbeatREST{}
	_ rest.StorageMetadata = &HeartbeatREST{}
)

func (h *HeartbeatREST) New() runtime.Object               { return &nodusv1.NodeHeartbeat{} }
func (h *HeartbeatREST) Destroy()                          {}
func (h *HeartbeatREST) ProducesMIMETypes(string) []string { return nil }
func (h *HeartbeatREST) ProducesObject(string) interface{} { return nodusv1.NodeHeartbeat{} }

// Create takes one heartbeat.
func (h *HeartbeatREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	beat, ok := obj.(*nodusv1.NodeHeartbeat)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a NodeHeartbeat, got %T", obj))
	}
	// All of the evidence is checked before any of it counts.
	if errs := validation.ValidateHeartbeatReservations(beat.Reservations, field.NewPath("reservations")); len(errs) > 0 {
		return nil, apierrors.NewInvalid(nodusv1.Kind("NodeHeartbeat"), name, errs)
	}
	// The watch cache answers a beat whose evidence cannot change anything
	// (a reserved node's every beat names its reservation at the epoch it
	// applied), as the authorizer's agent check does; a beat the cache
	// does not confirm (its generation, its credential) is checked against
	// etcd. Evidence that may count reads etcd: it is judged against the
	// Node as it is (a cleaning request made a moment ago), and counts only
	// from the current generation.
	cachedLive, settled, uids := h.settledEvidence(ctx, name, beat.Reservations)
	fresh := beat.Cleaning != nil || slices.Contains(settled, false)
	u, _ := genericapirequest.UserFrom(ctx)
	node, err := h.node(ctx, name, fresh)
	if err == nil && !fresh && staleBeat(u, beat, node) != "" {
		node, err = h.node(ctx, name, true)
	}
	if err != nil {
		return nil, err
	}
	if why := staleBeat(u, beat, node); why != "" {
		return nil, apierror.New(ctx, apierror.ReasonStaleAgent, nodusv1.Resource("nodes"), name, why, "")
	}
	if c := beat.Cleaning; c != nil {
		if errs := validation.ValidateCleaningReport(c.Steps, c.Message, c.CommandOutput, field.NewPath("cleaning")); len(errs) > 0 {
			return nil, apierrors.NewInvalid(nodusv1.Kind("NodeHeartbeat"), name, errs)
		}
	}
	answer := beat.DeepCopy()
	answer.IntervalSeconds = int32(h.Interval.Seconds())
	if len(options.DryRun) > 0 {
		return answer, nil
	}
	revived, err := h.Liveness.Beat(ctx, name)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable("recording the heartbeat: " + err.Error())
	}
	now := metav1.NewTime(h.now().Truncate(time.Second))
	// The node's applied epoch is that of its current (not yet final)
	// reservation; a node between reservations keeps the last one.
	applied, haveCurrent := int64(0), false
	// The first refusal of a reservation on this node: the tenant is
	// shown why it cannot log in (its ReservedHost's Connected condition).
	var refusal *nodusv1.AccessRefusal
	reads := 0
	for i, e := range beat.Reservations {
		live, uid := cachedLive[i], uids[i]
		if !settled[i] {
			if reads++; reads > maxEvidenceReads {
				continue
			}
			if live, uid, err = h.drain(ctx, name, e, now); err != nil {
				return nil, err
			}
		}
		if live && e.RefusedEpoch > 0 && e.RefusedUID == uid && refusal == nil {
			refusal = &nodusv1.AccessRefusal{Reservation: e.Name, ReservationUID: uid, Epoch: e.RefusedEpoch, Message: e.Refusal}
		}
		if e.AppliedEpoch == 0 && e.RefusedEpoch > 0 {
			// Nothing of it applied: the node's applied epoch stays.
			continue
		}
		if live && (!haveCurrent || e.AppliedEpoch > applied) {
			applied, haveCurrent = e.AppliedEpoch, true
		}
	}
	if !haveCurrent {
		applied = node.Status.AppliedEpoch
	}
	cleaning := h.cleaning(node, beat)
	if h.nodeChanged(node, applied, refusal, now, revived) || cleaning.Node != nil {
		var recorded *nodusv1.NodeCleaning
		_, _, err := h.Nodes.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
			func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
				n := old.(*nodusv1.Node).DeepCopy()
				if n.Status.AgentGeneration != beat.AgentGeneration || n.UID != node.UID {
					return nil, apierror.New(ctx, apierror.ReasonStaleAgent, nodusv1.Resource("nodes"), name,
						fmt.Sprintf("node %q was re-enrolled during the heartbeat", name), "")
				}
				recorded = nil
				if c := h.cleaning(n, beat); c.Node != nil {
					n, recorded = c.Node, c.Node.Status.Cleaning
				}
				h.applyBeat(n, applied, refusal, now)
				return n, nil
			}), nil, nil, false, &metav1.UpdateOptions{})
		if err != nil {
			return nil, err
		}
		if recorded != nil {
			logCleaning(name, recorded)
		}
	}
	if cleaning.Maintenance != "" {
		if err := h.maintain(ctx, name, cleaning.Maintenance); err != nil {
			return nil, err
		}
	}
	return answer, nil
}

// staleBeat says why beat, sent by u, is not heard as node's current
// agent's; "" when it is. The generation the beat names must be node's,
// and, from an agent, its credential's too: a cache that has not seen a
// re-enrollment yet lets the old credential past the authorizer, and its
// beat must not count by naming the new generation.
func staleBeat(u user.Info, beat *nodusv1.NodeHeartbeat, node *nodusv1.Node) string {
	if u != nil {
		if _, generation, isAgent := auth.NodeOf(u); isAgent && beat.AgentGeneration != generation {
			return fmt.Sprintf("the heartbeat names agent generation %d; its credential is of generation %d", beat.AgentGeneration, generation)
		}
		if why := auth.AgentRetired(u, node); why != "" {
			return why
		}
	}
	if beat.AgentGeneration != node.Status.AgentGeneration {
		return fmt.Sprintf("agent generation %d is not node %q's current generation %d", beat.AgentGeneration, node.Name, node.Status.AgentGeneration)
	}
	return ""
}

// node reads the Node from the watch cache, or with fresh from etcd.
func (h *HeartbeatREST) node(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error) {
	opts := &metav1.GetOptions{ResourceVersion: "0"}
	if fresh {
		opts = &metav1.GetOptions{}
	}
	obj, err := h.Nodes.Get(ctx, name, opts)
	if apierrors.IsNotFound(err) && !fresh {
		return h.node(ctx, name, true) // the cache may not have its enrollment yet
	}
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Node), nil
}

// cleaning is what the beat's cleaning evidence changes on n.
func (h *HeartbeatREST) cleaning(n *nodusv1.Node, beat *nodusv1.NodeHeartbeat) lifecycle.CleaningOutcome {
	if beat.Cleaning == nil {
		return lifecycle.CleaningOutcome{}
	}
	return lifecycle.RecordCleaning(n, *beat.Cleaning, beat.AgentGeneration, h.now())
}

// logCleaning records the agent's report of a cleaning in the server's log:
// the node keeps it until the next reservation claims the node, which its
// tenant could read there (lifecycle.Claim).
func logCleaning(node string, c *nodusv1.NodeCleaning) {
	exit := "none"
	if c.CommandExitCode != nil {
		exit = strconv.Itoa(int(*c.CommandExitCode))
	}
	klog.InfoS("Cleaning recorded", "node", node, "request", c.Request, "phase", c.Phase, "reservation", c.Reservation,
		"reservationUID", c.ReservationUID, "epoch", c.Epoch, "users", c.Users, "steps", c.Steps, "message", c.Message, "commandExitCode", exit, "commandOutput", c.CommandOutput)
}

// maintain puts a node whose cleaning failed in maintenance, with the reason.
func (h *HeartbeatREST) maintain(ctx context.Context, name, reason string) error {
	_, _, err := h.NodeSpecs.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*nodusv1.Node).DeepCopy()
			n.Spec.Maintenance, n.Spec.MaintenanceReason = true, reason
			return n, nil
		}), nil, nil, false, &metav1.UpdateOptions{FieldManager: "nodus-handover"})
	return err
}

// maxEvidenceReads bounds the reservations one beat makes the server read
// from etcd: an agent names the few on its node, which the watch cache
// mostly settles; one naming made-up reservations costs no more than this,
// and what it names beyond counts for nothing in that beat.
const maxEvidenceReads = 8

// settledEvidence reads the reservations the beat names from the watch
// cache and returns, by index, those whose evidence no version of the
// reservation newer than the cached one could make count, and whether each
// of those is live (on this node, not final). The others are judged on etcd.
func (h *HeartbeatREST) settledEvidence(ctx context.Context, node string, evidence []nodusv1.ReservationEvidence) (live, settled []bool, uids []types.UID) {
	live, settled, uids = make([]bool, len(evidence)), make([]bool, len(evidence)), make([]types.UID, len(evidence))
	for i, e := range evidence {
		obj, err := h.Reservations.Get(ctx, e.Name, &metav1.GetOptions{ResourceVersion: "0"})
		if err == nil {
			live[i], settled[i] = judgedByCache(obj.(*nodusv1.Reservation), node, e)
			uids[i] = obj.(*nodusv1.Reservation).UID
		}
	}
	return live, settled, uids
}

// judgedByCache judges evidence e about cached, a reservation as the watch
// cache holds it, where nothing etcd holds now could judge it otherwise
// (settled), and says whether it is live. A final reservation stays final.
// A reservation enters releasing or ending only with a new epoch, so when
// the cached version is on node, not final, at least at the epoch the agent
// applied, and does not drain on e, no later version drains on it either: a
// later one is at a higher epoch than e names. Anything else — drained,
// missing, elsewhere, or behind the agent — may be the cache lagging, and
// is judged on the reservation as stored.
func judgedByCache(cached *nodusv1.Reservation, node string, e nodusv1.ReservationEvidence) (live, settled bool) {
	switch {
	case cached == nil || cached.Status.Node != node:
		return false, false
	case lifecycle.Final(cached.Status.State):
		return false, true
	case e.AppliedEpoch > cached.Status.Epoch || lifecycle.Drain(cached.DeepCopy(), node, e, time.Time{}):
		return false, false
	}
	return true, true
}

// drain turns evidence into a final state: a releasing (ending) reservation
// on this node whose current epoch the agent applied, with no owner session
// and no borrower execution left, is released (ended). It reports whether
// the reservation is on this node and not final before this report, and
// its UID.
func (h *HeartbeatREST) drain(ctx context.Context, node string, e nodusv1.ReservationEvidence, now metav1.Time) (bool, types.UID, error) {
	obj, err := h.Reservations.Get(ctx, e.Name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	res := obj.(*nodusv1.Reservation)
	if res.Status.Node != node || lifecycle.Final(res.Status.State) {
		return false, res.UID, nil
	}
	if e.AppliedEpoch > res.Status.Epoch {
		// No agent applies an epoch the server has not issued: this is
		// about a deleted namesake (the agent has not seen the deletion
		// yet) or made up. It counts for nothing, not even the node's
		// applied epoch; refusing the beat would cost the node its
		// liveness.
		return false, res.UID, nil
	}
	if !lifecycle.Drain(res.DeepCopy(), node, e, now.Time) {
		return true, res.UID, nil
	}
	_, _, err = h.Reservations.Update(ctx, e.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			r := old.(*nodusv1.Reservation).DeepCopy()
			lifecycle.Drain(r, node, e, now.Time) // no change when the epoch moved on meanwhile: stale evidence
			return r, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	return true, res.UID, err
}

// nodeChanged says whether the beat changes node n. A beat that revived
// the node's lease does, with its time (unless the stored time is this
// very second, which only a clock ahead or an operator's write makes): the
// liveness controller may have read the node, Ready in the cache as in
// etcd, and found the lease gone a moment before, and its NotReady,
// written under what it read, would land after this beat and hold until
// the next. The beat's write moves the node on, so that that write
// conflicts and the controller looks again.
func (h *HeartbeatREST) nodeChanged(n *nodusv1.Node, applied int64, refusal *nodusv1.AccessRefusal, now metav1.Time, revived bool) bool {
	c := n.DeepCopy()
	h.applyBeat(c, applied, refusal, now)
	return c.Status.AppliedEpoch != n.Status.AppliedEpoch || !equality.Semantic.DeepEqual(c.Status.AccessRefusal, n.Status.AccessRefusal) ||
		!meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) ||
		c.Status.ProvisionState != n.Status.ProvisionState ||
		n.Status.LastHeartbeatTime == nil || (revived && !now.Equal(n.Status.LastHeartbeatTime))
}

// applyBeat is what a beat that changes node n (nodeChanged) writes to it:
// Ready, the applied epoch, the agent's refusal (none when it reports
// none), and the beat's time.
func (h *HeartbeatREST) applyBeat(n *nodusv1.Node, applied int64, refusal *nodusv1.AccessRefusal, now metav1.Time) {
	n.Status.AppliedEpoch = applied
	n.Status.AccessRefusal = refusal
	meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{
		Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived",
		Message: "the agent reports on time", LastTransitionTime: now,
	})
	n.Status.LastHeartbeatTime = &now
	if n.Status.ProvisionState == nodusv1.ProvisionStateEnroll {
		n.Status.ProvisionState = nodusv1.ProvisionStateAvailable
	}
}

func (h *HeartbeatREST) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}
