// Package nodeliveness marks a Node not ready when its agent's liveness lease
// expires (three missed heartbeat intervals), and on start-up and every
// resync for any node that claims to be ready without a live lease. A
// ready node's beats write nothing, its stored lastHeartbeatTime included:
// its last beat is recorded when its lease expires, by the controller with
// the NotReady and by the Recorder of each replica that does not lead (the
// replica the agent beat may not be the one that leads).
package nodeliveness

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	listers "github.com/nodus-dev/nodus/pkg/generated/listers/nodus/v1"
)

// Liveness is what the controller needs of the liveness tracker.
type Liveness interface {
	Alive(ctx context.Context, node string) (bool, error)
	AliveSet(ctx context.Context) (map[string]bool, error)
	WatchDeaths(ctx context.Context, died func(node string))
	LastBeat(node string) time.Time
}

// Controller keeps Node Ready conditions honest.
type Controller struct {
	Client versioned.Interface
	// Nodes is the informer's view the resync reads, instead of listing
	// every node from the server each interval.
	Nodes    listers.NodeLister
	Synced   cache.InformerSynced
	Liveness Liveness
	Resync   time.Duration
	Now      func() time.Time
}

// Run watches lease expiries and resyncs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	go c.Liveness.WatchDeaths(ctx, func(node string) {
		if err := c.markNotReady(ctx, node); err != nil {
			klog.ErrorS(err, "marking a node not ready", "node", node)
		}
	})
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced) {
		return
	}
	wait.UntilWithContext(ctx, c.resync, c.Resync)
}

// resync marks not ready the nodes that say they are ready without a live
// lease. It reads every live lease in one range, not one read per node:
// at 10,000 nodes and a 10 s interval that was 1,000 etcd reads a second.
func (c *Controller) resync(ctx context.Context) {
	nodes, err := c.Nodes.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "listing nodes for liveness")
		return
	}
	alive, err := c.Liveness.AliveSet(ctx)
	if err != nil {
		klog.ErrorS(err, "reading the live nodes")
		return
	}
	for _, n := range nodes {
		if alive[n.Name] || !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
			continue
		}
		// markNotReady reads the lease again: the node may have beaten since the range.
		if err := c.markNotReady(ctx, n.Name); err != nil {
			klog.ErrorS(err, "marking a node not ready", "node", n.Name)
		}
	}
}

// markNotReady writes node name not ready, with the last beat this replica
// heard of it (recordBeat).
func (c *Controller) markNotReady(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.NodusV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if alive, err := c.Liveness.Alive(ctx, name); err != nil || alive {
			return err // it came back meanwhile
		}
		changed := meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{
			Type: nodusv1.NodeConditionReady, Status: metav1.ConditionFalse, Reason: "HeartbeatMissed",
			Message: "no heartbeat from the agent within three intervals", LastTransitionTime: metav1.NewTime(c.Now()),
		})
		if !changed {
			return nil
		}
		recordBeat(n, c.Liveness.LastBeat(name))
		_, err = c.Client.NodusV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: "nodus-node-liveness"})
		return err
	})
}

// Recorder runs on every replica. When a node's lease expires it records
// the last beat this replica heard of the node as its lastHeartbeatTime,
// unless a later one is stored: agents beat whichever replica they reach,
// and the one that leads the controllers, which marks the node not ready,
// may have heard none of its last beats.
type Recorder struct {
	Client   versioned.Interface
	Liveness Liveness
	// Leading says whether this replica leads the controllers: then the
	// Controller records the last beat with the NotReady, in one write.
	Leading func() bool
}

// Run records last beats until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	r.Liveness.WatchDeaths(ctx, func(node string) {
		if err := r.record(ctx, node); err != nil {
			klog.ErrorS(err, "recording a node's last heartbeat", "node", node)
		}
	})
}

func (r *Recorder) record(ctx context.Context, name string) error {
	lastBeat := r.Liveness.LastBeat(name)
	if lastBeat.IsZero() || (r.Leading != nil && r.Leading()) {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := r.Client.NodusV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil || !recordBeat(n, lastBeat) {
			return err
		}
		_, err = r.Client.NodusV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: "nodus-node-liveness"})
		return err
	})
}

// recordBeat sets lastBeat as n's lastHeartbeatTime when it is later than
// the stored one (a beat another replica heard, or one that wrote the node
// since), and says whether it did.
func recordBeat(n *nodusv1.Node, lastBeat time.Time) bool {
	beat := metav1.NewTime(lastBeat.Truncate(time.Second))
	if lastBeat.IsZero() || (n.Status.LastHeartbeatTime != nil && !beat.After(n.Status.LastHeartbeatTime.Time)) {
		return false
	}
	n.Status.LastHeartbeatTime = &beat
	return true
}
