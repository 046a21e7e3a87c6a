package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestASelectionByNodeShowsItsReservationsAndNoOthers: the watch cache
// serves selections by status.node from an index (an agent's watch is sent
// only its node's events), so a watch and a LIST of one node must still
// show each of that node's Reservations arriving and leaving, and nothing
// of another node's.
func TestASelectionByNodeShowsItsReservationsAndNoOthers(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx := ctx(t)
	api := s.Client.NodusV1()
	if _, err := api.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "idx"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"idx-a", "idx-b"}
	for _, n := range nodes {
		if _, err := testfleet.Node(ctx, s.Client, n, "fra1", "gpu-h100x8", "ubuntu"); err != nil {
			t.Fatal(err)
		}
	}
	start, err := api.Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		typ       watch.EventType
		name, now string
	}
	var mu sync.Mutex
	events := map[string][]seen{}
	// Watches the index does not serve see every node's events, as before.
	selectors := map[string]string{"idx-a": "status.node=idx-a", "idx-b": "status.node=idx-b", "all": "", "not-a": "status.node!=idx-a"}
	for n, selector := range selectors {
		w, err := api.Reservations().Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: start.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				if r, ok := e.Object.(*nodusv1.Reservation); ok {
					mu.Lock()
					events[n] = append(events[n], seen{e.Type, r.Name, r.Status.Node})
					mu.Unlock()
				}
			}
		}()
	}
	// showed waits until node's watch has shown an event of type typ for
	// reservation name.
	showed := func(node string, typ watch.EventType, name string) {
		t.Helper()
		if err := testfleet.Eventually(ctx, 30*time.Second, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range events[node] {
				if e.typ == typ && e.name == name {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the watch of %s never showed %s %s: %+v", node, typ, name, events[node])
		}
	}
	listed := func(node string, opts metav1.ListOptions) []string {
		t.Helper()
		opts.FieldSelector = "status.node=" + node
		list, err := api.Reservations().List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range list.Items {
			names = append(names, r.Name)
		}
		return names
	}

	now := time.Now().Truncate(time.Second)
	for _, n := range nodes {
		if err := testfleet.Reserve(ctx, s.Client, n, "idx", nodusv1.ReservationPlacement{Node: n}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	showed("all", watch.Added, "idx-a")
	showed("not-a", watch.Added, "idx-b")
	for _, n := range nodes {
		showed("all", watch.Added, n)
		showed(n, watch.Added, n)
		for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: "0"}} {
			if got := listed(n, opts); len(got) != 1 || got[0] != n {
				t.Errorf("LIST status.node=%s (resourceVersion %q): %v", n, opts.ResourceVersion, got)
			}
		}
	}

	if err := api.Reservations().Delete(ctx, "idx-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	showed("idx-a", watch.Deleted, "idx-a")
	showed("all", watch.Deleted, "idx-a")
	if err := testfleet.Eventually(ctx, 30*time.Second, func(context.Context) (bool, error) {
		return len(listed("idx-a", metav1.ListOptions{ResourceVersion: "0"})) == 0, nil
	}); err != nil {
		t.Errorf("a deleted reservation is still listed by its node: %v", listed("idx-a", metav1.ListOptions{ResourceVersion: "0"}))
	}
	if got := listed("idx-b", metav1.ListOptions{}); len(got) != 1 || got[0] != "idx-b" {
		t.Errorf("LIST status.node=idx-b after idx-a's deletion: %v", got)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, e := range events["not-a"] {
		if e.now == "idx-a" && e.typ != watch.Deleted {
			t.Errorf("the watch of status.node!=idx-a showed %s of %s on idx-a", e.typ, e.name)
		}
	}
	for _, node := range nodes {
		for _, e := range events[node] {
			if e.now != node && e.typ != watch.Deleted {
				t.Errorf("the watch of %s showed %s of %s on node %q", node, e.typ, e.name, e.now)
			}
			if e.name != node {
				t.Errorf("the watch of %s showed another node's reservation: %+v", node, e)
			}
		}
	}
}
