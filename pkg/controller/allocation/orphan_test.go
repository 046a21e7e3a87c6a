package allocation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestOrphaned: a node's claim is one its allocation did not take once the
// allocation settled on no node or another one; while it is allocating the
// claim may be the one it is about to take.
func TestOrphaned(t *testing.T) {
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: nodusv1.NodeStatus{Allocation: "x"}}
	for name, tc := range map[string]struct {
		state nodusv1.AllocationState
		node  string
		want  bool
	}{
		"allocating":                 {nodusv1.AllocationStateAllocating, "", false},
		"not yet seen":               {"", "", false},
		"active on this node":        {nodusv1.AllocationStateActive, "a", false},
		"active on another node":     {nodusv1.AllocationStateActive, "b", true},
		"failed, on no node":         {nodusv1.AllocationStateError, "", true},
		"failed, naming another one": {nodusv1.AllocationStateError, "b", true},
	} {
		a := &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: nodusv1.AllocationStatus{State: tc.state, Node: tc.node}}
		if got := orphaned(n, a); got != tc.want {
			t.Errorf("%s: orphaned %v, want %v", name, got, tc.want)
		}
	}
}
