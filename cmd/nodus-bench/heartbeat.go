package main

import (
	"context"
	"fmt"
	"os"
	"time"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// heartbeat measures what heartbeats of many nodes cost the server and
// etcd: the first beat of each node (which creates its liveness lease and
// marks it ready), then steady-state rounds in which every node beats once.
// Figures are per heartbeat and extrapolated to nodes/interval beats a second.
func heartbeat(s *server, c config) error {
	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "heartbeat: creating %d nodes\n", c.nodes)
	if err := seedFleet(ctx, s, c.nodes, c.concurrency*4, false); err != nil {
		return err
	}
	beat := func(i int) error {
		return testfleet.Heartbeat(ctx, s.client, fleetName(i), nodusv1.NodeHeartbeat{})
	}
	type round struct {
		name              string
		beats             int
		elapsed, cpu      time.Duration
		writes, proposals int64
		p50, p99          time.Duration
	}
	measure := func(name string, rounds int) (round, error) {
		rev0, raft0, err := s.etcdCounters(ctx)
		if err != nil {
			return round{}, err
		}
		cpu0, err := s.cpu()
		if err != nil {
			return round{}, err
		}
		start := time.Now()
		var lat []time.Duration
		for r := 0; r < rounds; r++ {
			res, err := timedLatencies(c.nodes, c.concurrency*4, beat)
			if err != nil {
				return round{}, err
			}
			lat = append(lat, res...)
		}
		elapsed := time.Since(start)
		cpu1, _ := s.cpu()
		rev1, raft1, err := s.etcdCounters(ctx)
		if err != nil {
			return round{}, err
		}
		p50, p99 := percentiles(lat)
		return round{name, rounds * c.nodes, elapsed, cpu1 - cpu0, rev1 - rev0, raft1 - raft0, p50, p99}, nil
	}
	first, err := measure("first beat of each node", 1)
	if err != nil {
		return err
	}
	// One unmeasured round first: nodes whose first beat came more than
	// three intervals before their second were marked not ready meanwhile,
	// and their next beat writes them ready again — a recovery, not the
	// steady state.
	fmt.Fprintf(os.Stderr, "heartbeat: one settling round\n")
	if _, err := timedLatencies(c.nodes, c.concurrency*4, beat); err != nil {
		return err
	}
	steady, err := measure("steady state", c.rounds)
	if err != nil {
		return err
	}
	rate := float64(c.nodes) / c.interval.Seconds()
	fmt.Printf("heartbeat: %d nodes, %d concurrent agents' connections\n", c.nodes, c.concurrency*4)
	for _, r := range []round{first, steady} {
		perBeatWrites := float64(r.writes) / float64(r.beats)
		perBeatProposals := float64(r.proposals) / float64(r.beats)
		perBeatCPU := r.cpu / time.Duration(r.beats)
		fmt.Printf("  %-24s %6d beats in %-8s (%.0f/s)  p50 %-9s p99 %-9s\n", r.name+":", r.beats, r.elapsed.Round(time.Millisecond),
			float64(r.beats)/r.elapsed.Seconds(), r.p50, r.p99)
		fmt.Printf("  %-24s etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat\n", "", perBeatWrites, perBeatProposals, perBeatCPU)
		fmt.Printf("  %-24s at %d nodes / %s: %.1f etcd writes/s, %.1f raft proposals/s, %.2f server cores\n", "",
			c.nodes, c.interval, perBeatWrites*rate, perBeatProposals*rate, perBeatCPU.Seconds()*rate)
	}
	fmt.Printf("  between the two windows one unmeasured round lets nodes marked not ready during the first beats recover.\n")
	fmt.Printf("  not in these windows: each node's stored lastHeartbeatTime is refreshed at most every 5 min,\n" +
		"  one Node write (and one ReservedHost write for a reserved node) per node per 5 min.\n\n")
	return nil
}

// timedLatencies runs op n times on conc workers and returns each latency.
func timedLatencies(n, conc int, op func(i int) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	err := parallel(n, conc, func(i int) error {
		t := time.Now()
		err := op(i)
		lat[i] = time.Since(t)
		return err
	})
	return lat, err
}
