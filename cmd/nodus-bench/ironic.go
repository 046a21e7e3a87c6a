package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// ironicVersion is the microversion the scenario's requests ask for: one
// that finds nodes by name as well as by UUID.
const ironicVersion = "1.60"

// ironic measures what OpenStack clients pay to read one node or one
// allocation through /v1 (the Nova driver and metal3 read them by UUID, one
// at a time) on a fleet of -nodes nodes, -allocations of them allocated:
// GET /v1/nodes/{name} and /v1/nodes/{uuid} against the API's GET of the
// same Node, and the same for the allocations, each -gets requests by
// -concurrency clients over the allocated nodes, with the server's CPU per
// request.
func ironic(s *server, c config) error {
	ctx := context.Background()
	api := s.client.NodusV1()
	allocated := min(c.allocations, c.nodes)
	fmt.Fprintf(os.Stderr, "ironic: %d nodes, %d of them allocated\n", c.nodes, allocated)
	if err := seedFleet(ctx, s, c.nodes, c.concurrency*4, false); err != nil {
		return err
	}
	if err := parallel(c.nodes, c.concurrency*4, func(i int) error {
		return testfleet.Heartbeat(ctx, s.client, fleetName(i), nodusv1.NodeHeartbeat{})
	}); err != nil {
		return err
	}
	if err := parallel(allocated, c.concurrency, func(i int) error {
		_, err := api.Allocations().Create(ctx, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%05d", i)},
			Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	var nodes []nodusv1.Node
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := api.Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		nodes = nodes[:0]
		for _, n := range list.Items {
			if n.Status.Allocation != "" {
				nodes = append(nodes, n)
			}
		}
		return len(nodes) == allocated, nil
	}); err != nil {
		return fmt.Errorf("%d allocations never claimed their nodes (%d did): %w", allocated, len(nodes), err)
	}
	// No agent beats again: once their leases expire, the server marks
	// every node not ready, a status write each, which landed in the
	// measurements below (their walks swung 3× between runs, session 53).
	// They are measured after it.
	fmt.Fprintf(os.Stderr, "ironic: waiting for the server to mark the nodes not ready (no agent beats)\n")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := api.Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		for _, n := range list.Items {
			if meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("the server did not mark every node not ready: %w", err)
	}

	rest := api.RESTClient()
	// ironicGet reads path and checks that the view names what it links
	// to: a node its allocation, an allocation its node.
	ironicGet := func(path string) error {
		body, err := rest.Get().AbsPath(path).SetHeader("X-OpenStack-Ironic-API-Version", ironicVersion).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		var view struct {
			AllocationUUID string `json:"allocation_uuid"`
			NodeUUID       string `json:"node_uuid"`
		}
		if err := json.Unmarshal(body, &view); err != nil || view.AllocationUUID == "" && view.NodeUUID == "" {
			return fmt.Errorf("GET %s: %v, without its allocation or node: %.200s", path, err, body)
		}
		return nil
	}
	allocations := map[string]*nodusv1.Allocation{}
	list, err := api.Allocations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		allocations[list.Items[i].Name] = &list.Items[i]
	}
	allocationOf := func(n *nodusv1.Node) (*nodusv1.Allocation, error) {
		a, ok := allocations[n.Status.Allocation]
		if !ok {
			return nil, fmt.Errorf("node %s's allocation %s is not listed", n.Name, n.Status.Allocation)
		}
		return a, nil
	}
	measure := func(op func(n *nodusv1.Node) error) (result, time.Duration, error) {
		if err := s.quiesce(ctx); err != nil {
			return result{}, 0, err
		}
		cpu0, err := s.cpu()
		if err != nil {
			return result{}, 0, err
		}
		r, err := timed(c.gets, c.concurrency, func(i int) error { return op(&nodes[i%len(nodes)]) })
		if err != nil {
			return result{}, 0, err
		}
		cpu1, err := s.cpu()
		if err != nil {
			return result{}, 0, err
		}
		return r, (cpu1 - cpu0) / time.Duration(c.gets), nil
	}
	rows := []struct {
		name     string
		baseline bool // the API's GET, which the rows after it are compared with
		op       func(n *nodusv1.Node) error
	}{
		{"API GET of the Node", true, func(n *nodusv1.Node) error {
			_, err := api.Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			return err
		}},
		{"GET /v1/nodes/{name}", false, func(n *nodusv1.Node) error { return ironicGet("/v1/nodes/" + n.Name) }},
		{"GET /v1/nodes/{uuid}", false, func(n *nodusv1.Node) error { return ironicGet("/v1/nodes/" + string(n.UID)) }},
		{"API GET of the Allocation", true, func(n *nodusv1.Node) error {
			_, err := api.Allocations().Get(ctx, n.Status.Allocation, metav1.GetOptions{})
			return err
		}},
		{"GET /v1/allocations/{name}", false, func(n *nodusv1.Node) error {
			a, err := allocationOf(n)
			if err != nil {
				return err
			}
			return ironicGet("/v1/allocations/" + a.Name)
		}},
		{"GET /v1/allocations/{uuid}", false, func(n *nodusv1.Node) error {
			a, err := allocationOf(n)
			if err != nil {
				return err
			}
			return ironicGet("/v1/allocations/" + string(a.UID))
		}},
	}
	fmt.Printf("ironic: one object read at a time among %d nodes, %d of them allocated; %d requests by %d clients, over the allocated nodes and their allocations\n",
		c.nodes, allocated, c.gets, c.concurrency)
	var base result
	for _, row := range rows {
		r, cpu, err := measure(row.op)
		if err != nil {
			return err
		}
		if row.baseline {
			base = r
		}
		fmt.Printf("  %-28s %7.0f/s  p50 %-9s p99 %-9s server CPU %-9s per request  %.2f× the API GET\n",
			row.name, r.perSecond, r.p50, r.p99, cpu.Round(time.Microsecond), r.perSecond/base.perSecond)
	}
	return ironicWalks(ctx, s, c, allocated)
}

// ironicWalks times reading every node in pages of 1,000, as Nova's driver
// lists the fleet, and every allocation so: through the API (limit and
// continue) and through /v1 (limit and the next link; for nodes the
// summary and the detail), -walks times each by one client, with the
// server's CPU per walk.
func ironicWalks(ctx context.Context, s *server, c config, allocated int) error {
	api := s.client.NodusV1()
	const pageSize = 1000
	apiWalk := func(list func(metav1.ListOptions) (int, string, error)) func() (int, error) {
		return func() (int, error) {
			count, next := 0, ""
			for {
				n, cont, err := list(metav1.ListOptions{Limit: pageSize, Continue: next})
				if err != nil {
					return count, err
				}
				count += n
				if next = cont; next == "" {
					return count, nil
				}
			}
		}
	}
	nodePages := apiWalk(func(o metav1.ListOptions) (int, string, error) {
		list, err := api.Nodes().List(ctx, o)
		if err != nil {
			return 0, "", err
		}
		return len(list.Items), list.Continue, nil
	})
	allocationPages := apiWalk(func(o metav1.ListOptions) (int, string, error) {
		list, err := api.Allocations().List(ctx, o)
		if err != nil {
			return 0, "", err
		}
		return len(list.Items), list.Continue, nil
	})
	// ironicWalk reads collection (its items under key) page by page.
	ironicWalk := func(collection, key string) func() (int, error) {
		return func() (int, error) {
			count, path := 0, fmt.Sprintf("/v1/%s?limit=%d", collection, pageSize)
			for path != "" {
				u, err := url.Parse(path)
				if err != nil {
					return count, err
				}
				req := api.RESTClient().Get().AbsPath(u.Path).SetHeader("X-OpenStack-Ironic-API-Version", ironicVersion).
					SetHeader("Accept", "application/json")
				for k, vs := range u.Query() {
					for _, v := range vs {
						req = req.Param(k, v)
					}
				}
				body, err := req.DoRaw(ctx)
				if err != nil {
					return count, fmt.Errorf("GET %s: %w", path, err)
				}
				var page map[string]json.RawMessage
				var items []json.RawMessage
				if err := json.Unmarshal(body, &page); err != nil {
					return count, fmt.Errorf("GET %s: %w", path, err)
				}
				if err := json.Unmarshal(page[key], &items); err != nil {
					return count, fmt.Errorf("GET %s: %q: %w", path, key, err)
				}
				count += len(items)
				path = ""
				if next, ok := page["next"]; ok {
					if err := json.Unmarshal(next, &path); err != nil {
						return count, fmt.Errorf("GET %s: next: %w", path, err)
					}
				}
			}
			return count, nil
		}
	}
	walks := []struct {
		name string
		want int
		walk func() (int, error)
		// baseline: the API's walk of the same kind, which the row is
		// compared with.
		baseline bool
	}{
		{"API LIST of Nodes", c.nodes, nodePages, true},
		{"GET /v1/nodes", c.nodes, ironicWalk("nodes", "nodes"), false},
		{"GET /v1/nodes/detail", c.nodes, ironicWalk("nodes/detail", "nodes"), false},
		{"API LIST of Allocations", allocated, allocationPages, true},
		{"GET /v1/allocations", allocated, ironicWalk("allocations", "allocations"), false},
	}
	fmt.Printf("  every node (every allocation) read in pages of %d by one client, %d times each:\n", pageSize, c.walks)
	var base time.Duration
	for _, w := range walks {
		if err := s.quiesce(ctx); err != nil {
			return err
		}
		cpu0, err := s.cpu()
		if err != nil {
			return err
		}
		start := time.Now()
		for range c.walks {
			n, err := w.walk()
			if err != nil {
				return err
			}
			if n != w.want {
				return fmt.Errorf("%s: %d read, want %d", w.name, n, w.want)
			}
		}
		took := time.Since(start) / time.Duration(c.walks)
		cpu1, err := s.cpu()
		if err != nil {
			return err
		}
		if w.baseline {
			base = took
		}
		fmt.Printf("  %-28s %8s a walk  server CPU %-9s a walk  %.2f× the API LIST's speed\n",
			w.name, took.Round(time.Millisecond), ((cpu1 - cpu0) / time.Duration(c.walks)).Round(time.Millisecond), base.Seconds()/took.Seconds())
	}
	fmt.Println()
	return nil
}
