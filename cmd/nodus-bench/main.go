// Command nodus-bench measures nodus-server, started as a child process on
// its embedded etcd, against baselines measured in the same run:
//
//   - crud: API GET, LIST (1,000 objects) and UPDATE against raw etcd Get,
//     Range and Put of the same bytes on the same etcd, as ratios;
//
//   - release: release-capacity latency, and the time until an agent's watch
//     sees the new epoch;
//
//   - heartbeat: etcd writes and server CPU per heartbeat of many simulated
//     nodes, extrapolated to 10,000 nodes at a 10 s interval;
//
//   - allocation: allocations per second and POST-to-active latency of 1,000
//     allocations over 10,000 nodes, with one server and with two sharing an etcd;
//
//   - lending: execution create → scheduled → running latency against create →
//     seen by a watch, and the scheduler's throughput for 1,000 pending
//     executions over 1,000 lent hosts against the same status writes made
//     through the API;
//
//   - watchers: what the agents' watches of their own nodes' Reservations
//     cost: updates timed until the node's watch shows them, with 1,000 and
//     with 10,000 such watches open, and a LIST by node against a GET;
//
//   - ironic: GET of one node through OpenStack Ironic's /v1, by name and by
//     UUID, against the API's GET of the same Node, on 10,000 nodes of which
//     1,000 are allocated, and every node read in pages through /v1 against
//     the API's paged LIST;
//
//   - memory: the server's RSS with 10,000 nodes and 10,000 reserved hosts,
//     and the time from a restart on that data to ready.
//
//     go run ./cmd/nodus-bench [-scenarios crud,release,heartbeat] [-server bin/nodus-server]
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

type config struct {
	objects, gets, updates, lists, concurrency int
	releases                                   int
	nodes, rounds, allocations                 int
	lentHosts, latencyHosts, latencyRuns       int
	pending                                    int
	watchers, watchedHosts, watchUpdates       int
	walks                                      int
	interval, heartbeatWindow                  time.Duration
}

func main() {
	var c config
	var scenarios, binary string
	flag.StringVar(&scenarios, "scenarios", "crud,release,heartbeat,allocation,lending,watchers,ironic,memory", "which measurements to run")
	flag.StringVar(&binary, "server", "", "nodus-server binary (default: build it)")
	flag.IntVar(&c.objects, "objects", 1000, "crud: ReservedHosts to create; LIST returns all of them")
	flag.IntVar(&c.gets, "gets", 5000, "crud: GET requests per side; ironic: GET requests per row")
	flag.IntVar(&c.updates, "updates", 2000, "crud: UPDATE requests per side")
	flag.IntVar(&c.lists, "lists", 200, "crud: LIST requests per side")
	flag.IntVar(&c.concurrency, "concurrency", 8, "concurrent clients")
	flag.IntVar(&c.releases, "releases", 200, "release: hosts to release")
	flag.IntVar(&c.nodes, "nodes", 10000, "heartbeat, allocation, ironic: simulated nodes; memory: nodes, each reserved")
	flag.IntVar(&c.rounds, "rounds", 2, "heartbeat: rounds of all -nodes beats' worth measured with evidence (reserved nodes)")
	flag.IntVar(&c.allocations, "allocations", 1000, "allocation: allocations to make over -nodes nodes; ironic: nodes allocated")
	flag.IntVar(&c.lentHosts, "lent-hosts", 1000, "lending: lent 8-GPU hosts")
	flag.IntVar(&c.latencyHosts, "latency-hosts", 4, "lending: hosts with simulated agents for the create → running latency")
	flag.IntVar(&c.latencyRuns, "latency-runs", 100, "lending: executions timed one at a time")
	flag.IntVar(&c.pending, "pending", 1000, "lending: executions the scheduler places at once")
	flag.IntVar(&c.watchers, "watchers", 10000, "watchers: agents' Reservation watches open (status.node=NODE), one per node")
	flag.IntVar(&c.watchedHosts, "watched-hosts", 1000, "watchers: of those nodes, how many are reserved")
	flag.IntVar(&c.watchUpdates, "watch-updates", 2000, "watchers: Reservation updates timed until their node's watch shows them, per round")
	flag.IntVar(&c.walks, "walks", 5, "ironic: reads of every node in pages, per row")
	flag.DurationVar(&c.interval, "interval", 10*time.Second, "heartbeat: how often each node beats in the paced steady state")
	flag.DurationVar(&c.heartbeatWindow, "heartbeat-window", 30*time.Second, "heartbeat: how long the paced steady state is measured")
	flag.Parse()
	if c.watchedHosts < 1 || c.watchers < c.watchedHosts || c.watchUpdates < 1 {
		fmt.Fprintf(os.Stderr, "nodus-bench: -watched-hosts (%d) and -watch-updates (%d) must be at least 1, and -watchers (%d) at least -watched-hosts\n",
			c.watchedHosts, c.watchUpdates, c.watchers)
		os.Exit(2)
	}
	if err := run(c, binary, strings.Split(scenarios, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "nodus-bench:", err)
		os.Exit(1)
	}
}

func run(c config, binary string, scenarios []string) error {
	for _, name := range scenarios {
		if own, ok := map[string]func(config, string) error{"allocation": allocationScenario, "memory": memory}[name]; ok {
			if err := own(c, binary); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			continue
		}
		scenario, ok := map[string]func(*server, config) error{"crud": crud, "release": release, "heartbeat": heartbeat, "lending": lendingBench, "watchers": watchers, "ironic": ironic}[name]
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		// Each scenario gets a fresh server, so that none measures another's leftovers.
		dir, err := os.MkdirTemp("", "nodus-bench")
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s: starting nodus-server in %s\n", name, dir)
		s, err := startServer(binary, dir, "")
		if err != nil {
			return err
		}
		err = scenario(s, c)
		s.stop()
		if err != nil {
			// The server's log tells why: keep it.
			return fmt.Errorf("%s: %w (server's log: %s/server.log)", name, err, dir)
		}
		os.RemoveAll(dir)
	}
	return nil
}

type result struct {
	perSecond float64
	p50, p99  time.Duration
}

// timed runs op n times on conc workers and reports throughput and latency.
func timed(n, conc int, op func(i int) error) (result, error) {
	lat := make([]time.Duration, n)
	start := time.Now()
	err := parallel(n, conc, func(i int) error {
		t := time.Now()
		err := op(i)
		lat[i] = time.Since(t)
		return err
	})
	elapsed := time.Since(start)
	if err != nil {
		return result{}, err
	}
	p50, p99 := percentiles(lat)
	return result{perSecond: float64(n) / elapsed.Seconds(), p50: p50, p99: p99}, nil
}

func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	n := len(sorted)
	return sorted[n/2].Round(time.Microsecond), sorted[n*99/100].Round(time.Microsecond)
}

// parallel runs op for 0..n-1 on conc workers and returns the first error.
func parallel(n, conc int, op func(i int) error) error { return testfleet.Parallel(n, conc, op) }
