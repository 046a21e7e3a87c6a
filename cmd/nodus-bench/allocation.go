package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// allocationScenario measures allocations over a large fleet, first through
// one server, then through two servers sharing one etcd.
func allocationScenario(c config, binary string) error {
	for _, replicas := range []int{1, 2} {
		dir, err := os.MkdirTemp("", "nodus-bench")
		if err != nil {
			return err
		}
		if err := allocationRun(c, binary, dir, replicas); err != nil {
			// The servers' logs tell why: keep them.
			return fmt.Errorf("%w (servers' logs: %s/server-*/server.log)", err, dir)
		}
		os.RemoveAll(dir)
	}
	fmt.Println()
	return nil
}

func allocationRun(c config, binary, dir string, replicas int) error {
	ctx := context.Background()
	etcdURL := ""
	if replicas > 1 {
		etcd, err := embeddedetcd.StartInsecure(dir+"/etcd", time.Minute)
		if err != nil {
			return err
		}
		defer etcd.Stop(ctx)
		etcdURL = etcd.ClientURL
	}
	var servers []*server
	for i := 0; i < replicas; i++ {
		sub := fmt.Sprintf("%s/server-%d", dir, i)
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "allocation: starting nodus-server %d of %d\n", i+1, replicas)
		s, err := startServer(binary, sub, etcdURL)
		if err != nil {
			return err
		}
		defer s.stop()
		servers = append(servers, s)
	}
	first := servers[0]
	fmt.Fprintf(os.Stderr, "allocation: creating %d ready nodes\n", c.nodes)
	if err := seedFleet(ctx, first, c.nodes, c.concurrency*4, false); err != nil {
		return err
	}
	if err := parallel(c.nodes, c.concurrency*4, func(i int) error {
		return testfleet.Heartbeat(ctx, servers[i%replicas].client, fleetName(i), nodusv1.NodeHeartbeat{})
	}); err != nil {
		return err
	}

	allocations := first.client.NodusV1().Allocations()
	_, w, err := listAndWatch(ctx, metav1.ListOptions{}, allocations.List, allocations.Watch)
	if err != nil {
		return err
	}
	defer w.Stop()
	var mu sync.Mutex
	posted, done, errored := map[string]time.Time{}, map[string]time.Duration{}, map[string]bool{}
	finished := make(chan struct{})
	failed := 0
	go func() {
		for e := range w.ResultChan() {
			a, ok := e.Object.(*nodusv1.Allocation)
			if !ok || e.Type == watch.Deleted {
				continue
			}
			at := time.Now()
			mu.Lock()
			if start, ok := posted[a.Name]; ok && (a.Status.State == nodusv1.AllocationStateActive || a.Status.State == nodusv1.AllocationStateError) {
				if _, seen := done[a.Name]; !seen {
					done[a.Name] = at.Sub(start)
					if a.Status.State == nodusv1.AllocationStateError {
						failed++
						errored[a.Name] = true
					}
				}
			}
			n := len(done)
			mu.Unlock()
			if n == c.allocations {
				close(finished)
				return
			}
		}
	}()
	start := time.Now()
	if err := parallel(c.allocations, c.concurrency, func(i int) error {
		name := fmt.Sprintf("bench-%05d", i)
		mu.Lock()
		posted[name] = time.Now()
		mu.Unlock()
		_, err := servers[i%replicas].client.NodusV1().Allocations().Create(ctx, &nodusv1.Allocation{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("only %d of %d allocations finished", len(done), c.allocations)
	}
	elapsed := time.Since(start)
	// Only the allocations that became active count, in the rate and in
	// the latencies; the failed are told apart.
	var lat []time.Duration
	mu.Lock()
	for name, d := range done {
		if !errored[name] {
			lat = append(lat, d)
		}
	}
	mu.Unlock()
	if len(lat) == 0 {
		return fmt.Errorf("none of %d allocations became active (%d failed)", c.allocations, failed)
	}
	p50, p99 := percentiles(lat)
	perSecond := float64(len(lat)) / elapsed.Seconds()
	fmt.Printf("allocation: %d allocations over %d ready nodes, %d server(s), %d concurrent clients\n", c.allocations, c.nodes, replicas, c.concurrency)
	fmt.Printf("  %.0f allocations/s (first POST to last active); POST → active p50 %s p99 %s; %d failed\n",
		perSecond, p50, p99, failed)
	if updateRate > 0 {
		fmt.Printf("  %.2f× the API UPDATE rate of this run's crud scenario (%.0f/s, JSON client)\n", perSecond/updateRate, updateRate)
	}
	return nil
}
