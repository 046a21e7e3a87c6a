package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// lendingBench measures, on -lent-hosts lent 8-GPU hosts:
//
//   - create → scheduled and create → running of executions, one at a time,
//     on a few hosts whose simulated agents (real credentials, the real watch
//     and report calls, no processes) report them running and succeeded;
//   - scheduler throughput: -pending executions that wait on their
//     borrower's cap are released at once by raising the cap, and the time
//     until the watch shows all of them scheduled is taken.
func lendingBench(s *server, c config) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := s.client.NodusV1()
	fmt.Fprintf(os.Stderr, "lending: %d reserved hosts with 8 GPUs each\n", c.lentHosts)
	if err := seedFleet(ctx, s, c.lentHosts, c.concurrency*4, true); err != nil {
		return err
	}
	if _, err := api.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "borrower"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	pool, err := api.Pools().Get(ctx, "bench", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pool.Spec.Lending = &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 1 << 20}}}
	if pool, err = api.Pools().Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		return err
	}
	agents, err := enrollAgents(ctx, s, c.latencyHosts)
	if err != nil {
		return err
	}
	all := make([]string, 0, c.lentHosts+len(agents))
	for i := 0; i < c.lentHosts; i++ {
		all = append(all, fleetName(i))
	}
	for name := range agents {
		all = append(all, name)
	}
	// The reservation controller writes the nodes' status too: retry on its conflicts.
	if err := parallel(len(all), c.concurrency*4, func(i int) error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := api.Nodes().Get(ctx, all[i], metav1.GetOptions{})
			if err != nil {
				return err
			}
			// The memory and CPUs a lend shares out; the enrolled hosts
			// report no inventory of their own.
			n.Status.Inventory.CPU, n.Status.Inventory.MemoryMiB = 224, 2<<20
			n.Status.Inventory.GPUs = nil
			for g := 0; g < 8; g++ {
				n.Status.Inventory.GPUs = append(n.Status.Inventory.GPUs, nodusv1.NodeGPU{Type: "h100-sxm-80g", MemoryMiB: 81559})
			}
			_, err = api.Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}); err != nil {
		return err
	}
	// The fleet's agents heartbeat (as the operator; the latency hosts' own
	// agents report executions) so that every host stays ready.
	beat := func() error {
		return parallel(len(all), c.concurrency*4, func(i int) error {
			n, err := api.Nodes().Get(ctx, all[i], metav1.GetOptions{ResourceVersion: "0"})
			if err != nil {
				return err
			}
			_, err = api.Nodes().Heartbeat(ctx, all[i], &nodusv1.NodeHeartbeat{AgentGeneration: n.Status.AgentGeneration}, metav1.CreateOptions{})
			return err
		})
	}
	if err := beat(); err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				_ = beat()
			}
		}
	}()
	if err := waitActive(ctx, s, len(all)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lending: lending %d hosts\n", len(all))
	if err := parallel(len(all), c.concurrency, func(i int) error {
		epoch := int64(1)
		_, err := api.ReservedHosts("bench").Lend(ctx, all[i], &nodusv1.ReservedHostLendRequest{Epoch: &epoch}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}

	// The latency executions go to pool "agents", whose hosts have agents
	// that report; the scheduler still considers the whole fleet in every pass.
	if err := latency(ctx, s, c, agents); err != nil {
		return err
	}
	return throughput(ctx, s, c, pool)
}

// enrollAgents enrolls n nodes into pool "agents" (lent to "borrower") and
// returns their agents' credentials.
func enrollAgents(ctx context.Context, s *server, n int) (map[string]*rest.Config, error) {
	api := s.client.NodusV1()
	if _, err := api.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "agents"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 1 << 20}}}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	now := time.Now().Truncate(time.Second)
	out := map[string]*rest.Config{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("agent-%02d", i)
		dir, err := os.MkdirTemp(s.dir, "agent-")
		if err != nil {
			return nil, err
		}
		if out[name], err = testfleet.EnrollAgent(ctx, s.client, s.config.Host, name,
			nodusv1.EnrollmentTokenSpec{Pool: "agents", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir); err != nil {
			return nil, err
		}
		if err := testfleet.Reserve(ctx, s.client, name, "bench", nodusv1.ReservationPlacement{Node: name}, now.Add(-time.Hour), now.Add(24*time.Hour)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// latency submits executions one at a time and times them to scheduled and to running.
func latency(ctx context.Context, s *server, c config, agents map[string]*rest.Config) error {
	for name, cfg := range agents {
		node, err := s.client.NodusV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		go simulatedAgent(ctx, cfg, lending.HostAlias(node))
	}
	api := s.client.NodusV1().Executions("borrower")
	_, w, err := listAndWatch(ctx, metav1.ListOptions{}, api.List, api.Watch)
	if err != nil {
		return err
	}
	defer w.Stop()
	// toSeen, the baseline: the same watch showing the created object at all.
	var toSeen, toScheduled, toRunning []time.Duration
	for i := 0; i < c.latencyRuns; i++ {
		start := time.Now()
		e, err := api.Create(ctx, &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("latency-%04d", i)},
			Spec: nodusv1.ExecutionSpec{Pool: "agents", Command: []string{"true"}, GPUs: 1, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		scheduled, seen := time.Duration(0), time.Duration(0)
		for scheduled == 0 || len(toRunning) <= i {
			select {
			case ev := <-w.ResultChan():
				got, ok := ev.Object.(*nodusv1.Execution)
				if !ok || ev.Type == watch.Deleted || got.Name != e.Name {
					continue
				}
				if seen == 0 {
					seen = time.Since(start)
					toSeen = append(toSeen, seen)
				}
				if scheduled == 0 && got.Status.Phase != nodusv1.ExecutionPending {
					scheduled = time.Since(start)
					toScheduled = append(toScheduled, scheduled)
				}
				if got.Status.Phase == nodusv1.ExecutionRunning || got.Status.Phase == nodusv1.ExecutionSucceeded {
					toRunning = append(toRunning, time.Since(start))
				}
			case <-time.After(30 * time.Second):
				return fmt.Errorf("execution %s never ran", e.Name)
			}
		}
	}
	b50, b99 := percentiles(toSeen)
	s50, s99 := percentiles(toScheduled)
	r50, r99 := percentiles(toRunning)
	fmt.Printf("lending: %d executions, one at a time, %d lent hosts in all (%d with simulated agents)\n", c.latencyRuns, c.lentHosts+len(agents), len(agents))
	fmt.Printf("  create → seen by a watch p50 %-10s p99 %s (baseline: the API's own write and watch)\n", b50, b99)
	fmt.Printf("  create → scheduled p50 %-10s p99 %-10s (%.1f× the baseline at p50)\n", s50, s99, float64(s50)/float64(b50))
	fmt.Printf("  create → running   p50 %-10s p99 %s (the agent's watch and its report included)\n", r50, r99)
	return nil
}

// simulatedAgent reports each execution placed on alias running, then succeeded.
func simulatedAgent(ctx context.Context, cfg *rest.Config, alias string) {
	client := versioned.NewForConfigOrDie(cfg).NodusV1()
	all := client.Executions("")
	_, w, err := listAndWatch(ctx, metav1.ListOptions{FieldSelector: "status.host=" + alias}, all.List, all.Watch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lending: agent watch:", err)
		return
	}
	defer w.Stop()
	report := func(e *nodusv1.Execution, phase nodusv1.ExecutionPhase) error {
		_, err := client.Executions(e.Namespace).Report(ctx, e.Name, &nodusv1.ExecutionReport{Phase: phase}, metav1.CreateOptions{})
		return err
	}
	for ev := range w.ResultChan() {
		if e, ok := ev.Object.(*nodusv1.Execution); ok && e.Status.Phase == nodusv1.ExecutionScheduled {
			if report(e, nodusv1.ExecutionRunning) == nil {
				_ = report(e, nodusv1.ExecutionSucceeded)
			}
		}
	}
}

// throughput holds -pending executions behind their borrower's cap, lifts
// the cap in one update and times the scheduler placing all of them.
func throughput(ctx context.Context, s *server, c config, pool *nodusv1.Pool) error {
	api := s.client.NodusV1()
	pool, err := api.Pools().Get(ctx, pool.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pool.Spec.Lending.Borrowers[0].MaxGPUs = 1
	if pool, err = api.Pools().Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lending: submitting %d executions held by a 1-GPU cap\n", c.pending)
	if err := parallel(c.pending, c.concurrency, func(i int) error {
		_, err := api.Executions("borrower").Create(ctx, &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pending-%05d", i)},
			Spec: nodusv1.ExecutionSpec{Pool: "bench", Command: []string{"true"}, GPUs: 1, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	// Wait until all but the one the cap lets through say why they wait.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := api.Executions("borrower").List(ctx, metav1.ListOptions{FieldSelector: "spec.pool=bench,status.phase=pending"})
		if err != nil {
			return false, nil
		}
		waiting := 0
		for _, e := range list.Items {
			if e.Status.Reason == "Waiting" {
				waiting++
			}
		}
		return waiting == c.pending-1, nil
	}); err != nil {
		return fmt.Errorf("the executions never all waited on the cap: %w", err)
	}
	executions := api.Executions("borrower")
	held, w, err := listAndWatch(ctx, metav1.ListOptions{FieldSelector: "spec.pool=bench"}, executions.List, executions.Watch)
	if err != nil {
		return err
	}
	defer w.Stop()
	var mu sync.Mutex
	scheduled := map[string]*nodusv1.Execution{}
	// The one execution the cap let through is scheduled already.
	for i := range held.Items {
		if e := &held.Items[i]; e.Status.Phase == nodusv1.ExecutionScheduled {
			scheduled[e.Name] = e
		}
	}
	done := make(chan struct{})
	go func() {
		for ev := range w.ResultChan() {
			if e, ok := ev.Object.(*nodusv1.Execution); ok && e.Status.Phase == nodusv1.ExecutionScheduled {
				mu.Lock()
				scheduled[e.Name] = e
				n := len(scheduled)
				mu.Unlock()
				if n == c.pending {
					close(done)
					return
				}
			}
		}
	}()
	pool.Spec.Lending.Borrowers[0].MaxGPUs = 1 << 20
	start := time.Now()
	if _, err := api.Pools().Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("only %d of %d executions were scheduled", len(scheduled), c.pending)
	}
	elapsed := time.Since(start)
	placements := float64(c.pending-1) / elapsed.Seconds()

	// The scheduler then brings the owners' HostLendings in line with the
	// placements (a write per host): the baseline waits for that, so that
	// it measures the API alone and not against those writes.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		lendings, err := api.HostLendings("bench").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var borrowed int32
		for _, l := range lendings.Items {
			borrowed += l.Status.BorrowedGPUs
		}
		return int(borrowed) == c.pending, nil
	}); err != nil {
		return fmt.Errorf("the HostLendings never showed the %d placed GPUs: %w", c.pending, err)
	}

	// Baseline: the same number of status writes of the same executions,
	// straight through the API with as many writers as the scheduler has.
	mu.Lock()
	objects := make([]*nodusv1.Execution, 0, len(scheduled))
	for _, e := range scheduled {
		objects = append(objects, e)
	}
	mu.Unlock()
	bench, err := timed(len(objects), 16, func(i int) error {
		e := objects[i].DeepCopy()
		e.Status.Message = "baseline write"
		_, err := api.Executions("borrower").UpdateStatus(ctx, e, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("lending: scheduler throughput, %d pending executions (1 GPU each) over %d lent hosts\n", c.pending-1, c.lentHosts)
	fmt.Printf("  cap lifted → all scheduled in %s: %.0f placements/s (each a status write; HostLendings updated in the same passes)\n",
		elapsed.Round(time.Millisecond), placements)
	fmt.Printf("  baseline: %d status writes through the API, 16 writers: %.0f writes/s; scheduler = %.2f× the baseline\n",
		len(objects), bench.perSecond, placements/bench.perSecond)
	return idleWrites(ctx, s, c)
}

// idleWrites measures what Node writes that change nothing a scheduling
// pass reads cost the server while executions are placed (an operator's
// labels, an agent's inventory; until session 46 the heartbeats wrote each
// Node's lastHeartbeatTime every 5 minutes, 33 writes a second at 10,000
// nodes). Label writes stand for them, against the same writes to the
// hosts' ReservedHosts, which no pass reads.
func idleWrites(ctx context.Context, s *server, c config) error {
	api := s.client.NodusV1()
	n := 2 * c.lentHosts
	measure := func(write func(name, patch string) error) (time.Duration, float64, error) {
		cpu0, err := s.cpu()
		if err != nil {
			return 0, 0, err
		}
		res, err := timed(n, c.concurrency, func(i int) error {
			return write(fleetName(i%c.lentHosts), fmt.Sprintf(`{"metadata":{"labels":{"bench.nodus.dev/seq":"%d"}}}`, i))
		})
		if err != nil {
			return 0, 0, err
		}
		// The passes the last writes started end within a second.
		time.Sleep(time.Second)
		cpu1, err := s.cpu()
		return (cpu1 - cpu0) / time.Duration(n), res.perSecond, err
	}
	hostCPU, hostRate, err := measure(func(name, patch string) error {
		_, err := api.ReservedHosts("bench").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	nodeCPU, nodeRate, err := measure(func(name, patch string) error {
		_, err := api.Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("  %d Node writes no pass needs (labels): %.0f/s, server CPU %s each; the same to ReservedHosts (baseline): %.0f/s, %s each; Node/ReservedHost CPU %.2f\n\n",
		n, nodeRate, nodeCPU.Round(time.Microsecond), hostRate, hostCPU.Round(time.Microsecond), float64(nodeCPU)/float64(hostCPU))
	return nil
}
