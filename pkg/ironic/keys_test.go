package ironic

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestANodeListFiltersAndSortsByWhatTheViewShows: a node list filters and
// sorts every node by its row (nodeRow), read field by field, and builds
// whole views for its page alone. Each sort key must read what the node's
// view shows, and each filter must pass the nodes Ironic's would, or a
// list would page over other nodes than it shows.
func TestANodeListFiltersAndSortsByWhatTheViewShows(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	plain := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	full := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "full", UID: "6fa459ea-ee8a-3ca4-894e-db77e160355e", CreationTimestamp: metav1.NewTime(created)},
		Spec: nodusv1.NodeSpec{ResourceClass: "gpu-h100x8", Pool: "fra1", Maintenance: true, MaintenanceReason: "fan", Owner: "ops",
			Traits: []string{"CUSTOM_A"}, Extra: map[string]string{"k": "v"}},
		Status: nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateAvailable}}
	const alloc = "0e6b3f2a-7c1d-4b8e-9f00-123456789abc"

	type sample struct {
		node       *nodusv1.Node
		allocation string
	}
	plainFree, plainHeld, fullFree, fullHeld := sample{plain, ""}, sample{plain, alloc}, sample{full, ""}, sample{full, alloc}
	samples := []sample{plainFree, plainHeld, fullFree, fullHeld}

	// What each sort key reads: a null field sorts as "".
	sorts := map[sample]map[string]string{}
	for _, s := range samples {
		sorts[s] = map[string]string{
			"uuid": string(s.node.UID), "name": s.node.Name, "updated_at": "", "power_state": "", "driver": "nodus",
			"instance_uuid": s.allocation,
		}
	}
	for _, s := range []sample{plainFree, plainHeld} {
		for k, v := range map[string]string{"created_at": "", "provision_state": "enroll", "resource_class": "",
			"maintenance": "false", "maintenance_reason": "", "conductor_group": "", "owner": ""} {
			sorts[s][k] = v
		}
	}
	for _, s := range []sample{fullFree, fullHeld} {
		for k, v := range map[string]string{"created_at": "2026-03-04T04:06:07+00:00", "provision_state": "available",
			"resource_class": "gpu-h100x8", "maintenance": "true", "maintenance_reason": "fan", "conductor_group": "fra1", "owner": "ops"} {
			sorts[s][k] = v
		}
	}
	for _, s := range samples {
		row, view := nodeRow{s.node, s.allocation}, nodeView("https://nodus", s.node, s.allocation)
		for _, key := range nodeSortKeys {
			want, ok := sorts[s][key]
			if !ok {
				t.Fatalf("sort key %s has no expected value in this test", key)
			}
			if got := sortable(row.field(key)); got != want {
				t.Errorf("%s (allocation %q): sort key %s reads %q from the row, want %q", s.node.Name, s.allocation, key, got, want)
			}
			if _, shown := view[key]; !shown {
				t.Errorf("%s: sort key %s is not a field of the node's view", s.node.Name, key)
			}
			if got := sortable(view[key]); got != want {
				t.Errorf("%s (allocation %q): the view shows %s as %q, want %q", s.node.Name, s.allocation, key, got, want)
			}
		}
	}

	// Which samples each filter passes.
	filters := []struct {
		name, value string
		pass        []sample
	}{
		{"associated", "true", []sample{plainHeld, fullHeld}},
		{"associated", "no", []sample{plainFree, fullFree}},
		{"maintenance", "1", []sample{fullFree, fullHeld}},
		{"maintenance", "false", []sample{plainFree, plainHeld}},
		{"instance_uuid", alloc, []sample{plainHeld, fullHeld}},
		{"instance_uuid", "0E6B3F2A-7C1D-4B8E-9F00-123456789ABC", []sample{plainHeld, fullHeld}},
		{"chassis_uuid", alloc, nil},
		{"provision_state", "enroll", []sample{plainFree, plainHeld}},
		{"provision_state", "available", []sample{fullFree, fullHeld}},
		{"driver", "nodus", samples},
		{"driver", "ipmi", nil},
		{"resource_class", "gpu-h100x8", []sample{fullFree, fullHeld}},
		{"fault", "power failure", nil},
		{"conductor_group", "FRA1", []sample{fullFree, fullHeld}},
		{"conductor_group", "", []sample{plainFree, plainHeld}},
		{"conductor", "c1", nil},
		{"owner", "ops", []sample{fullFree, fullHeld}},
		{"description_contains", "fan", nil},
	}
	tested := map[string]bool{}
	for _, f := range filters {
		tested[f.name] = true
		for _, s := range samples {
			want := false
			for _, p := range f.pass {
				want = want || p == s
			}
			got, err := matchNode(map[string][]string{f.name: {f.value}}, nodeRow{s.node, s.allocation})
			if err != nil || got != want {
				t.Errorf("%s (allocation %q): %s=%q passes: %v (%v), want %v", s.node.Name, s.allocation, f.name, f.value, got, err, want)
			}
		}
	}
	for name, f := range nodeListParams {
		if f.match != nil && !tested[name] {
			t.Errorf("filter %s is not tested here", name)
		}
	}
	// A value that is none is refused whatever the node.
	for _, bad := range [][2]string{{"associated", "maybe"}, {"instance_uuid", "nope"}, {"provision_state", "ready"}, {"fault", "bad"}} {
		if _, err := matchNode(map[string][]string{bad[0]: {bad[1]}}, nodeRow{plain, ""}); err == nil {
			t.Errorf("%s=%q: no error", bad[0], bad[1])
		}
	}
}

// TestAnAllocationListSortsByWhatTheViewShows: an allocation list sorts
// every allocation by its row (allocationRow) and builds whole views for
// its page alone; each sort key must read what the allocation's view
// shows.
func TestAnAllocationListSortsByWhatTheViewShows(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	plain := &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "a1", UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	full := &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "a2", UID: "6fa459ea-ee8a-3ca4-894e-db77e160355e", CreationTimestamp: metav1.NewTime(created)},
		Spec: nodusv1.AllocationSpec{IronicName: "job-7", ResourceClass: "gpu-h100x8", Owner: "ops", Traits: []string{"CUSTOM_A"},
			CandidateNodes: []string{"n1"}, Extra: map[string]string{"k": "v"}},
		Status: nodusv1.AllocationStatus{State: nodusv1.AllocationStateError, LastError: "no node"}}
	want := map[*nodusv1.Allocation]map[string]string{
		plain: {"uuid": string(plain.UID), "name": "", "created_at": "", "updated_at": "", "state": "allocating",
			"last_error": "", "resource_class": "", "owner": ""},
		full: {"uuid": string(full.UID), "name": "job-7", "created_at": "2026-03-04T04:06:07+00:00", "updated_at": "",
			"state": "error", "last_error": "no node", "resource_class": "gpu-h100x8", "owner": "ops"},
	}
	for a, fields := range want {
		row, view := allocationRow{a}, allocationView("https://nodus", a, "")
		for _, key := range allocationSortKeys {
			w, ok := fields[key]
			if !ok {
				t.Fatalf("sort key %s has no expected value in this test", key)
			}
			if got := sortable(row.field(key)); got != w {
				t.Errorf("%s: sort key %s reads %q from the row, want %q", a.Name, key, got, w)
			}
			if _, shown := view[key]; !shown {
				t.Errorf("%s: sort key %s is not a field of the allocation's view", a.Name, key)
			}
			if got := sortable(view[key]); got != w {
				t.Errorf("%s: the view shows %s as %q, want %q", a.Name, key, got, w)
			}
		}
	}
}
