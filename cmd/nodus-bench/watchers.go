package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// watchers measures what the agents' watches cost the server. Every nodusd
// watches the Reservations of its own node (status.node=NODE), reserved or
// not, and lists them again whenever its watch ends; a lent host's agent
// also watches the Executions placed on it (status.host=ALIAS). With
// -watchers such watches open, -watched-hosts of them on reserved nodes,
// the scenario writes -watch-updates label changes to those nodes'
// Reservations and times each until the node's own watch shows it: first
// with only the reserved nodes' watches open, then with all of them. It
// then times LISTs by status.node against GETs of the same Reservation.
func watchers(s *server, c config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := s.client.NodusV1()
	hosts := c.watchedHosts
	fmt.Fprintf(os.Stderr, "watchers: %d reserved nodes\n", hosts)
	if err := seedFleet(ctx, s, hosts, c.concurrency, true); err != nil {
		return err
	}
	if err := waitActive(ctx, s, hosts); err != nil {
		return err
	}

	// sent holds when each update was sent, by reservation=label value;
	// the node's own watch takes it out when it shows that value.
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var seenLat []time.Duration
	var seenCount atomic.Int64
	const label = "bench.nodus.dev/seq"
	for i := 0; i < hosts; i++ {
		name := fleetName(i)
		_, w, err := listAndWatch(ctx, metav1.ListOptions{FieldSelector: "status.node=" + name}, api.Reservations().List, api.Reservations().Watch)
		if err != nil {
			return err
		}
		go func() {
			defer w.Stop()
			for e := range w.ResultChan() {
				r, ok := e.Object.(*nodusv1.Reservation)
				if !ok || e.Type != watch.Modified {
					continue
				}
				at := time.Now()
				mu.Lock()
				if start, ok := sent[r.Name+"="+r.Labels[label]]; ok {
					seenLat = append(seenLat, at.Sub(start))
					delete(sent, r.Name+"="+r.Labels[label])
					seenCount.Add(1)
				}
				mu.Unlock()
			}
		}()
	}

	seq := 0
	round := func(title string) error {
		seenCount.Store(0)
		mu.Lock()
		seenLat = seenLat[:0]
		mu.Unlock()
		cpu0, err := s.cpu()
		if err != nil {
			return err
		}
		base := seq
		seq += c.watchUpdates
		written, err := timed(c.watchUpdates, c.concurrency, func(i int) error {
			name, value := fleetName(i%hosts), strconv.Itoa(base+i)
			mu.Lock()
			sent[name+"="+value] = time.Now()
			mu.Unlock()
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, value)
			_, err := api.Reservations().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		})
		if err != nil {
			return err
		}
		deadline := time.Now().Add(time.Minute)
		for seenCount.Load() < int64(c.watchUpdates) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cpu1, err := s.cpu()
		if err != nil {
			return err
		}
		mu.Lock()
		lat := append([]time.Duration(nil), seenLat...)
		mu.Unlock()
		if len(lat) < c.watchUpdates {
			return fmt.Errorf("%s: the nodes' watches showed %d of %d updates within a minute", title, len(lat), c.watchUpdates)
		}
		p50, p99 := percentiles(lat)
		fmt.Printf("  %-34s %6.0f updates/s; server CPU %s per update; update → the node's watch p50 %-10s p99 %s\n",
			title, written.perSecond, ((cpu1 - cpu0) / time.Duration(c.watchUpdates)).Round(time.Microsecond), p50, p99)
		return nil
	}

	fmt.Printf("watchers: %d Reservation updates by %d clients over %d reserved nodes, each timed until its node's watch (status.node=NODE) shows it\n",
		c.watchUpdates, c.concurrency, hosts)
	if err := round(fmt.Sprintf("%d watches (the reserved nodes'):", hosts)); err != nil {
		return err
	}
	idle := c.watchers - hosts
	fmt.Fprintf(os.Stderr, "watchers: opening %d watches of unreserved nodes\n", idle)
	list, err := api.Reservations().List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil {
		return err
	}
	opened := time.Now()
	var ended atomic.Int64
	if err := parallel(idle, c.concurrency*4, func(i int) error {
		w, err := api.Reservations().Watch(ctx, metav1.ListOptions{FieldSelector: fmt.Sprintf("status.node=idle-%05d", i), ResourceVersion: list.ResourceVersion})
		if err != nil {
			return err
		}
		go func() {
			defer w.Stop()
			for range w.ResultChan() {
			}
			ended.Add(1)
		}()
		return nil
	}); err != nil {
		return fmt.Errorf("opening the unreserved nodes' watches: %w", err)
	}
	fmt.Fprintf(os.Stderr, "watchers: %d watches opened in %s\n", idle, time.Since(opened).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	if err := round(fmt.Sprintf("%d watches (and %d unreserved):", c.watchers, idle)); err != nil {
		return err
	}
	if n := ended.Load(); n > 0 {
		// The watch cache closes a watcher it cannot feed: the round then
		// ran with fewer watches than it says.
		fmt.Printf("  %d of the %d unreserved nodes' watches were closed by the server before the round ended\n", n, idle)
	}

	node := fleetName(hosts / 2)
	get, err := timed(c.watchUpdates, c.concurrency, func(int) error {
		_, err := api.Reservations().Get(ctx, node, metav1.GetOptions{ResourceVersion: "0"})
		return err
	})
	if err != nil {
		return err
	}
	byNode, err := timed(c.watchUpdates, c.concurrency, func(int) error {
		l, err := api.Reservations().List(ctx, metav1.ListOptions{FieldSelector: "status.node=" + node, ResourceVersion: "0"})
		if err == nil && len(l.Items) != 1 {
			err = fmt.Errorf("a LIST by status.node=%s found %d Reservations", node, len(l.Items))
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("  LIST status.node=NODE of %d Reservations (a relist; a report's lending check): %.0f/s p50 %s; GET of that Reservation %.0f/s p50 %s; LIST/GET throughput %.2f\n\n",
		hosts, byNode.perSecond, byNode.p50, get.perSecond, get.p50, byNode.perSecond/get.perSecond)
	return nil
}
