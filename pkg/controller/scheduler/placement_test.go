package scheduler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestOnlyANodeWriteAPassReadsStartsOne: every Node write started a pass
// over every execution and GPU claim; a heartbeat's lastHeartbeatTime alone
// is written 33 times a second at 10,000 nodes. A write that changes what a
// pass reads of the node starts one; any other does not.
func TestOnlyANodeWriteAPassReadsStartsOne(t *testing.T) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	base := &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-001", UID: "uid-1", Labels: map[string]string{"rack": "r1"}},
		Spec:       nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"},
		Status: nodusv1.NodeStatus{
			Reservation: "r1", ReservationUID: "res-uid-1", ExecutionSlots: 8, AppliedEpoch: 1, LastHeartbeatTime: &now,
			Inventory:  nodusv1.NodeInventory{CPU: 224, MemoryMiB: 2 << 20, GPUs: []nodusv1.NodeGPU{{Type: "h100-sxm-80g", MemoryMiB: 81559}}},
			Conditions: []metav1.Condition{{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue, Reason: "HeartbeatReceived", LastTransitionTime: now}},
		},
	}
	for _, c := range []struct {
		name   string
		change func(n *nodusv1.Node)
		pass   bool
	}{
		{"lastHeartbeatTime", func(n *nodusv1.Node) {
			later := metav1.NewTime(now.Add(5 * time.Minute))
			n.Status.LastHeartbeatTime = &later
		}, false},
		{"a label", func(n *nodusv1.Node) { n.Labels["rack"] = "r2" }, false},
		{"the applied epoch", func(n *nodusv1.Node) { n.Status.AppliedEpoch = 2 }, false},
		{"Ready's message", func(n *nodusv1.Node) { n.Status.Conditions[0].Message = "the agent reports on time" }, false},
		{"the resource class", func(n *nodusv1.Node) { n.Spec.ResourceClass = "gpu-b200x8" }, false},
		{"the free disk", func(n *nodusv1.Node) { n.Status.Inventory.DiskGiB = 3000 }, false},
		{"a GPU's type", func(n *nodusv1.Node) { n.Status.Inventory.GPUs[0].Type = "h200-sxm-141g" }, false},
		{"the UID (a node made again)", func(n *nodusv1.Node) { n.UID = "uid-2" }, true},
		{"the pool", func(n *nodusv1.Node) { n.Spec.Pool = "ams1" }, true},
		{"maintenance", func(n *nodusv1.Node) { n.Spec.Maintenance = true }, true},
		{"not ready", func(n *nodusv1.Node) {
			meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionFalse, Reason: "AgentSilent"})
		}, true},
		{"the execution slots", func(n *nodusv1.Node) { n.Status.ExecutionSlots = 4 }, true},
		{"the reservation held", func(n *nodusv1.Node) { n.Status.Reservation = "r2" }, true},
		{"the reservation's UID", func(n *nodusv1.Node) { n.Status.ReservationUID = "res-uid-2" }, true},
		{"the GPUs", func(n *nodusv1.Node) {
			n.Status.Inventory.GPUs = append(n.Status.Inventory.GPUs, n.Status.Inventory.GPUs[0])
		}, true},
		{"the memory", func(n *nodusv1.Node) { n.Status.Inventory.MemoryMiB = 1 << 20 }, true},
		{"the CPUs", func(n *nodusv1.Node) { n.Status.Inventory.CPU = 112 }, true},
	} {
		changed := base.DeepCopy()
		c.change(changed)
		if got := placementChanged(base, changed); got != c.pass {
			t.Errorf("%s changed: a pass %v, want %v", c.name, got, c.pass)
		}
	}
	if placementChanged(base, base.DeepCopy()) {
		t.Error("a write that changed nothing starts a pass")
	}
}
