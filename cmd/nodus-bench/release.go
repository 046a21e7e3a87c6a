package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// release measures release-capacity's latency and how long until a watch
// on the Reservations — the agent's channel — delivers the new epoch.
func release(s *server, c config) error {
	ctx := context.Background()
	api := s.client.NodusV1()
	if err := seedFleet(ctx, s, c.releases, c.concurrency, true); err != nil {
		return err
	}
	if err := waitActive(ctx, s, c.releases); err != nil {
		return err
	}

	_, w, err := listAndWatch(ctx, metav1.ListOptions{FieldSelector: "status.state=releasing"}, api.Reservations().List, api.Reservations().Watch)
	if err != nil {
		return err
	}
	defer w.Stop()
	var mu sync.Mutex
	sent, told := map[string]time.Time{}, map[string]time.Duration{}
	allTold := make(chan struct{})
	go func() {
		for e := range w.ResultChan() {
			r, ok := e.Object.(*nodusv1.Reservation)
			if !ok || e.Type == watch.Deleted || r.Status.Epoch != 2 {
				continue
			}
			at := time.Now()
			mu.Lock()
			if start, ok := sent[r.Name]; ok {
				if _, seen := told[r.Name]; !seen {
					told[r.Name] = at.Sub(start)
				}
			}
			n := len(told)
			mu.Unlock()
			if n == c.releases {
				close(allTold)
				return
			}
		}
	}()

	latency, err := timed(c.releases, c.concurrency, func(i int) error {
		name := fleetName(i)
		mu.Lock()
		sent[name] = time.Now()
		mu.Unlock()
		agreed, epoch := true, int64(1)
		_, err := api.ReservedHosts("bench").ReleaseCapacity(ctx, name, &nodusv1.ReservedHostReleaseRequest{Agreed: &agreed, Epoch: &epoch}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	select {
	case <-allTold:
	case <-time.After(time.Minute):
		return fmt.Errorf("the watch delivered %d of %d releases", len(told), c.releases)
	}
	var toldLat []time.Duration
	mu.Lock()
	for _, d := range told {
		toldLat = append(toldLat, d)
	}
	mu.Unlock()
	tp50, tp99 := percentiles(toldLat)
	fmt.Printf("release: %d hosts released by %d concurrent clients\n", c.releases, c.concurrency)
	fmt.Printf("  release-capacity latency   p50 %-10s p99 %-10s (%.0f releases/s)\n", latency.p50, latency.p99, latency.perSecond)
	fmt.Printf("  release → agent's watch    p50 %-10s p99 %s\n\n", tp50, tp99)
	return nil
}

// waitActive waits until n reserved hosts of project bench are active. It
// lists once a second from the watch cache: at 10,000 hosts a list is not
// free, and the memory scenario measures the server meanwhile.
func waitActive(ctx context.Context, s *server, n int) error {
	err := wait.PollUntilContextTimeout(ctx, time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := s.client.NodusV1().ReservedHosts("bench").List(ctx, metav1.ListOptions{FieldSelector: "status.reservation.state=active", ResourceVersion: "0"})
		return err == nil && len(list.Items) == n, nil
	})
	if err != nil {
		return fmt.Errorf("%d hosts never became active: %w", n, err)
	}
	return nil
}

func fleetName(i int) string { return fmt.Sprintf("host-%05d", i) }

// seedFleet creates project "bench", pool "bench" and n nodes, each with a
// reservation when reserve is set.
func seedFleet(ctx context.Context, s *server, n, conc int, reserve bool) error {
	api := s.client.NodusV1()
	if _, err := api.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := api.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	now := time.Now().Truncate(time.Second)
	return parallel(n, conc, func(i int) error {
		name := fleetName(i)
		if _, err := testfleet.Node(ctx, s.client, name, "bench", "gpu-h100x8", "ubuntu"); err != nil {
			return err
		}
		if !reserve {
			return nil
		}
		return testfleet.Reserve(ctx, s.client, name, "bench", nodusv1.ReservationPlacement{Node: name}, now.Add(-time.Hour), now.Add(24*time.Hour))
	})
}
