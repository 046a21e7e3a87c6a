package ironic

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestANodeListFiltersAndSortsByKeysAsByViews: a node list filters and
// sorts every node by its keys (nodeKeys), and builds whole views for its
// page alone; each sort key and each filter must answer by the keys as it
// answers by the whole view, or a list would page over other nodes than it
// shows.
func TestANodeListFiltersAndSortsByKeysAsByViews(t *testing.T) {
	nodes := []*nodusv1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "full", UID: "6fa459ea-ee8a-3ca4-894e-db77e160355e", CreationTimestamp: metav1.Now()},
			Spec: nodusv1.NodeSpec{ResourceClass: "gpu-h100x8", Pool: "fra1", Maintenance: true, MaintenanceReason: "fan", Owner: "ops",
				Traits: []string{"CUSTOM_A"}, Extra: map[string]string{"k": "v"}},
			Status: nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateAvailable}},
	}
	allocations := []string{"", "0e6b3f2a-7c1d-4b8e-9f00-123456789abc"}
	values := []string{"", "true", "false", "1", "gpu-h100x8", "fra1", "FRA1", "ops", "nodus", "available", "enroll",
		"0e6b3f2a-7c1d-4b8e-9f00-123456789abc", "0E6B3F2A-7C1D-4B8E-9F00-123456789ABC", "other"}
	for _, n := range nodes {
		for _, alloc := range allocations {
			keys, view := nodeKeys(n, alloc), nodeView("https://nodus", n, alloc)
			for _, key := range nodeSortKeys {
				if _, ok := keys[key]; !ok {
					t.Errorf("sort key %s is not among a node's keys", key)
				}
				if got, want := sortable(keys[key]), sortable(view[key]); got != want {
					t.Errorf("%s (allocation %q): sort key %s is %q by its keys, %q by its view", n.Name, alloc, key, got, want)
				}
			}
			for name, f := range nodeListParams {
				if f.match == nil {
					continue
				}
				for _, v := range values {
					byKeys, errKeys := f.match(keys, v)
					byView, errView := f.match(view, v)
					if byKeys != byView || fmt.Sprint(errKeys) != fmt.Sprint(errView) {
						t.Errorf("%s (allocation %q): filter %s=%q answers %v (%v) by its keys, %v (%v) by its view",
							n.Name, alloc, name, v, byKeys, errKeys, byView, errView)
					}
				}
			}
		}
	}
}
