package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	measure := func(name string, rounds, nodes int, beat func(i int) error) (round, error) {
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
			res, err := timedLatencies(nodes, c.concurrency*4, beat)
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
		return round{name, rounds * nodes, elapsed, cpu1 - cpu0, rev1 - rev0, raft1 - raft0, p50, p99}, nil
	}
	first, err := measure("first beat of each node", 1, c.nodes, beat)
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
	steady, err := measure("steady state", c.rounds, c.nodes, beat)
	if err != nil {
		return err
	}
	// A reserved node's agent names its reservation and the epoch it
	// applied in every beat: the evidence a release drains on.
	reserved := min(c.nodes, reservedBeaters)
	fmt.Fprintf(os.Stderr, "heartbeat: reserving %d of the nodes\n", reserved)
	evidence, err := reserveBeaters(ctx, s, reserved, c.concurrency*4)
	if err != nil {
		return err
	}
	beatWithEvidence := func(i int) error {
		return testfleet.Heartbeat(ctx, s.client, fleetName(i), nodusv1.NodeHeartbeat{Reservations: evidence[i : i+1]})
	}
	// The first beat with evidence records each node's applied epoch (a
	// write), which the controllers then project into each ReservedHost:
	// the steady state comes after both.
	if _, err := timedLatencies(reserved, c.concurrency*4, beatWithEvidence); err != nil {
		return err
	}
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	withEvidence, err := measure("reserved, with evidence", c.rounds*c.nodes/reserved, reserved, beatWithEvidence)
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
	r := withEvidence
	fmt.Printf("  %d of the nodes reserved, each beat naming its reservation and applied epoch (the agent's evidence):\n", reserved)
	fmt.Printf("  %-24s %6d beats in %-8s (%.0f/s)  p50 %-9s p99 %-9s\n", r.name+":", r.beats, r.elapsed.Round(time.Millisecond),
		float64(r.beats)/r.elapsed.Seconds(), r.p50, r.p99)
	fmt.Printf("  %-24s etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat; %.2f cores if all %d nodes were reserved\n", "",
		float64(r.writes)/float64(r.beats), float64(r.proposals)/float64(r.beats), r.cpu/time.Duration(r.beats),
		(r.cpu/time.Duration(r.beats)).Seconds()*rate, c.nodes)
	fmt.Printf("  between the two windows one unmeasured round lets nodes marked not ready during the first beats recover.\n")
	fmt.Printf("  not in these windows: each node's stored lastHeartbeatTime is refreshed at most every 5 min,\n" +
		"  one Node write (and one ReservedHost write for a reserved node) per node per 5 min.\n\n")
	return nil
}

// reservedBeaters is how many of the heartbeat scenario's nodes are
// reserved for its window of beats with evidence.
const reservedBeaters = 2000

// reserveBeaters reserves the first n nodes of the fleet, each to its own
// reservation (named after the node), waits until all are active, and
// returns the evidence each node's agent would send: its reservation at
// the epoch it applied, nobody logged in.
func reserveBeaters(ctx context.Context, s *server, n, conc int) ([]nodusv1.ReservationEvidence, error) {
	now := time.Now().Truncate(time.Second)
	if err := parallel(n, conc, func(i int) error {
		return testfleet.Reserve(ctx, s.client, fleetName(i), "bench", nodusv1.ReservationPlacement{Node: fleetName(i)}, now.Add(-time.Hour), now.Add(24*time.Hour))
	}); err != nil {
		return nil, err
	}
	if err := waitActive(ctx, s, n); err != nil {
		return nil, err
	}
	list, err := s.client.NodusV1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	epochs := map[string]int64{}
	for _, r := range list.Items {
		epochs[r.Name] = r.Status.Epoch
	}
	evidence := make([]nodusv1.ReservationEvidence, n)
	for i := range evidence {
		evidence[i] = nodusv1.ReservationEvidence{Name: fleetName(i), AppliedEpoch: epochs[fleetName(i)]}
	}
	return evidence, nil
}

// quiesce waits until etcd's revision has not moved for a second: the
// writes the controllers make in answer to the last ones are done.
func (s *server) quiesce(ctx context.Context) error {
	last, _, err := s.etcdCounters(ctx)
	if err != nil {
		return err
	}
	for range 60 {
		time.Sleep(time.Second)
		now, _, err := s.etcdCounters(ctx)
		if err != nil {
			return err
		}
		if now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("etcd's revision still moves after a minute")
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
