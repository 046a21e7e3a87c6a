package integration

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/liveness"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAReadyNodesBeatsWriteNothingAndItsLastBeatIsRecorded: a Ready node's
// beats that change nothing write nothing, however old its stored
// lastHeartbeatTime (until session 46 a beat wrote it again once it was 5
// minutes old: 33 writes a second at 10,000 nodes, and as many of their
// ReservedHosts); when the node stops beating, the server records the last
// beat it heard as the node's lastHeartbeatTime, and the tenant's host
// shows it.
func TestAReadyNodesBeatsWriteNothingAndItsLastBeatIsRecorded(t *testing.T) {
	// A lease of 6 s outlasts the set-up between two beats below.
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.HeartbeatInterval = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f := newFleet(t, s)
	f.host(t, "h-beats", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	nodes := s.Client.NodusV1().Nodes()
	beat := func() {
		t.Helper()
		r := f.heartbeat(t, "h-beats", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h-beats", 1, 0, 0)}})
		if r.code != 200 {
			t.Fatalf("heartbeat: %d %s", r.code, r.body)
		}
	}
	beat()
	f.waitHost(t, "h-beats", func(h *nodusv1.ReservedHost) bool {
		return meta.IsStatusConditionTrue(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
	})

	// The stored time made an hour old, as a node Ready that long has it.
	beat()
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	n, err := nodes.Get(ctx(t), "h-beats", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.LastHeartbeatTime = &old
	if n, err = nodes.UpdateStatus(ctx(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
		t.Fatalf("the node is not ready before the beats: %+v", n.Status.Conditions)
	}
	var before, after time.Time
	for range 5 {
		before = time.Now()
		beat()
		after = time.Now()
		time.Sleep(400 * time.Millisecond)
	}
	beaten, err := nodes.Get(ctx(t), "h-beats", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if beaten.ResourceVersion != n.ResourceVersion || !beaten.Status.LastHeartbeatTime.Equal(&old) {
		t.Fatalf("five beats of a Ready node wrote it: resourceVersion %s → %s, lastHeartbeatTime %v → %v",
			n.ResourceVersion, beaten.ResourceVersion, old, beaten.Status.LastHeartbeatTime)
	}

	// No more beats: the lease expires after three intervals, and the
	// node's last beat is recorded with its NotReady.
	var dead *nodusv1.Node
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		dead, err = nodes.Get(c, "h-beats", metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionFalse(dead.Status.Conditions, nodusv1.NodeConditionReady), err
	}); err != nil {
		t.Fatalf("the node never became not ready: %v", err)
	}
	last := dead.Status.LastHeartbeatTime
	if last == nil || last.Time.Before(before.Truncate(time.Second)) || last.Time.After(after) {
		t.Fatalf("the not ready node's lastHeartbeatTime is %v; its last beat was sent between %s and %s", last, before, after)
	}
	f.waitHost(t, "h-beats", func(h *nodusv1.ReservedHost) bool {
		return h.Status.LastHeartbeatTime.Equal(last)
	})
}

// TestAReplicaThatDoesNotLeadRecordsTheLastBeatItHeard: agents beat
// whichever replica they reach, and the replica leading the controllers
// (which marks a silent node not ready) may have heard none of a node's
// last beats. The replica that heard them records the last one when the
// node's lease expires, leading or not.
func TestAReplicaThatDoesNotLeadRecordsTheLastBeatItHeard(t *testing.T) {
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.HeartbeatInterval = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f := newFleet(t, s)
	f.node(t, "h-follower")
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	giveBack := takeTheLead(t, etcd) // the server leads nothing now

	var before, after time.Time
	for range 5 {
		before = time.Now()
		if r := f.heartbeat(t, "h-follower", nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
			t.Fatalf("heartbeat: %d %s", r.code, r.body)
		}
		after = time.Now()
		time.Sleep(400 * time.Millisecond)
	}
	nodes := s.Client.NodusV1().Nodes()
	var n *nodusv1.Node
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		gone, err := etcd.Get(c, liveness.Prefix+"h-follower")
		if err != nil || len(gone.Kvs) > 0 {
			return false, err
		}
		n, err = nodes.Get(c, "h-follower", metav1.GetOptions{})
		return err == nil && n.Status.LastHeartbeatTime != nil && !n.Status.LastHeartbeatTime.Time.Before(before.Truncate(time.Second)), err
	}); err != nil {
		t.Fatalf("the node's last beat, sent between %s and %s, was never recorded: %v; lastHeartbeatTime %v", before, after, err, n.Status.LastHeartbeatTime)
	}
	if n.Status.LastHeartbeatTime.Time.After(after) {
		t.Fatalf("lastHeartbeatTime %v is later than the last beat, sent between %s and %s", n.Status.LastHeartbeatTime, before, after)
	}
	if !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
		t.Fatalf("the node was marked not ready with no replica leading: %+v", n.Status.Conditions)
	}
	recorded := n.Status.LastHeartbeatTime

	// Once a replica leads again, the node is marked not ready, its
	// recorded last beat kept.
	giveBack()
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		n, err = nodes.Get(c, "h-follower", metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionFalse(n.Status.Conditions, nodusv1.NodeConditionReady), err
	}); err != nil {
		t.Fatalf("the node was never marked not ready: %v", err)
	}
	if !n.Status.LastHeartbeatTime.Equal(recorded) {
		t.Errorf("marking the node not ready changed its lastHeartbeatTime from %v to %v", recorded, n.Status.LastHeartbeatTime)
	}
}
