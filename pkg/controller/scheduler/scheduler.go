// Package scheduler places borrowers' pending executions on lent hosts and
// keeps each owner's HostLending in step with what is borrowed.
//
// It works in passes over the informers' caches: one pass sees every lent
// host and every execution, so caps and GPUs are counted once, in one place.
// Only the elected leader runs it. Placements it wrote and the cache does not
// show yet are remembered ("assumed"), so a pass never hands out a GPU that
// an earlier pass gave away; and every GPU placement is first claimed in
// etcd (claims.go), so that no other scheduler — an old leader that has not
// noticed yet — hands it out either.
package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	listers "github.com/nodus-dev/nodus/pkg/generated/listers/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/outcome"
)

const (
	fieldManager = "nodus-scheduler"
	// writers is how many status writes a pass has in flight at once.
	writers = 16
	// resync runs a pass even without events, as a safety net.
	resync = 30 * time.Second
)

// Controller is the scheduler.
type Controller struct {
	client       versioned.Interface
	reservations listers.ReservationLister
	nodes        listers.NodeLister
	pools        listers.PoolLister
	lendings     listers.HostLendingLister
	projects     listers.ProjectLister
	synced       []cache.InformerSynced
	trigger      chan struct{}
	now          func() time.Time

	// lendingIndex finds the reservations with a lending agreement and a node.
	lendingIndex cache.Indexer
	// openIndex finds the executions not finished: a pass reads only those,
	// not the finished ones borrowers keep (up to 1,000 a project).
	openIndex cache.Indexer
	claims    *gpuClaims
	mu        sync.Mutex
	assumed   map[types.UID]placement
	// aliasOf remembers host aliases by node UID; only passes use it.
	aliasOf map[types.UID]string
}

// placement is where an execution was put.
type placement struct {
	alias string
	gpus  []int32
	// The sandbox's limits the execution was given there.
	memoryMiB, milliCPUs int64
}

// New wires the scheduler to the informers of factory; its GPU placements
// are claimed in etcd through kv.
func New(client versioned.Interface, factory externalversions.SharedInformerFactory, kv clientv3.KV) (*Controller, error) {
	v1 := factory.Nodus().V1()
	c := &Controller{
		client:       client,
		reservations: v1.Reservations().Lister(),
		nodes:        v1.Nodes().Lister(),
		pools:        v1.Pools().Lister(),
		lendings:     v1.HostLendings().Lister(),
		projects:     v1.Projects().Lister(),
		trigger:      make(chan struct{}, 1),
		now:          time.Now,
		assumed:      map[types.UID]placement{},
		claims:       &gpuClaims{kv: kv, now: time.Now},
	}
	// A pass reads only the reservations with a lending agreement: among
	// 10,000 reservations, a walk over all of them each pass took a tenth
	// of the server's CPU while they activated.
	reservations := v1.Reservations().Informer()
	if err := reservations.AddIndexers(cache.Indexers{indexLending: func(obj interface{}) ([]string, error) {
		if r, ok := obj.(*nodusv1.Reservation); ok && r.Status.Lending != nil && r.Status.Node != "" {
			return []string{lendingAgreed}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.lendingIndex = reservations.GetIndexer()
	executions := v1.Executions().Informer()
	if err := executions.AddIndexers(cache.Indexers{indexOpen: func(obj interface{}) ([]string, error) {
		if e, ok := obj.(*nodusv1.Execution); ok && !e.Status.Phase.Finished() {
			return []string{executionOpen}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.openIndex = executions.GetIndexer()
	for _, informer := range []cache.SharedIndexInformer{
		v1.Executions().Informer(), v1.Reservations().Informer(), v1.Nodes().Informer(),
		v1.Pools().Informer(), v1.HostLendings().Informer(), v1.Projects().Informer(),
	} {
		if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(interface{}) { c.poke() },
			UpdateFunc: func(old, new interface{}) {
				if o, ok := old.(*nodusv1.Node); ok {
					if n, ok := new.(*nodusv1.Node); ok && !placementChanged(o, n) {
						return
					}
				}
				c.poke()
			},
			DeleteFunc: func(interface{}) { c.poke() },
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, informer.HasSynced)
	}
	return c, nil
}

// placementChanged says whether an update of a Node changes anything a pass
// reads of it (hosts, aliases, and the agent's readiness for the executions
// placed there): keep it in step with them. Most Node writes change none of
// it (labels, an inventory report, until session 46 a heartbeat's
// lastHeartbeatTime every 5 minutes: 33 writes a second at 10,000 nodes),
// and each started a pass over every execution and GPU claim, back to back
// on the leader. The resync's pass still comes every 30 s.
func placementChanged(old, new *nodusv1.Node) bool {
	ready := func(n *nodusv1.Node) bool {
		return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	}
	return old.UID != new.UID || old.Spec.Pool != new.Spec.Pool || old.Spec.Maintenance != new.Spec.Maintenance ||
		ready(old) != ready(new) || old.Status.ExecutionSlots != new.Status.ExecutionSlots ||
		old.Status.Reservation != new.Status.Reservation || old.Status.ReservationUID != new.Status.ReservationUID ||
		// Of the inventory, what lending.WithHostShare and GPUCount read:
		// its free disk, which the agent reports again every 5 minutes
		// when it moved, is not.
		len(old.Status.Inventory.GPUs) != len(new.Status.Inventory.GPUs) ||
		old.Status.Inventory.MemoryMiB != new.Status.Inventory.MemoryMiB || old.Status.Inventory.CPU != new.Status.Inventory.CPU
}

func (c *Controller) poke() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run makes passes until ctx ends: after events, coalesced, and every resync.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	klog.InfoS("scheduler started")
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
		case <-time.After(resync):
		}
		if err := c.Pass(ctx); err != nil {
			klog.ErrorS(err, "scheduling pass")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			c.poke()
		}
	}
}

// host is one lent host as a pass sees it.
type host struct {
	alias       string
	pool        string
	reservation *nodusv1.Reservation
	// agreement is the reservation's lending agreement, its missing caps
	// filled from the node's inventory (lending.WithHostShare).
	agreement  *nodusv1.ReservationLending
	placeable  bool // lent, agent ready, not in maintenance, its share known
	maxGPUs    int32
	maxExec    int32
	gpuUsed    []bool // by index; len is the host's GPU count
	usedGPUs   int32
	executions int32
	// The memory and CPUs the executions placed here were given: together
	// never more than the agreement lends.
	usedMemoryMiB, usedMilliCPUs int64
	usage                        lending.Usage
}

func (h *host) freeIndices(n int32) []int32 {
	var out []int32
	for i, used := range h.gpuUsed {
		if int32(len(out)) == n {
			break
		}
		if !used {
			out = append(out, int32(i))
		}
	}
	if int32(len(out)) < n {
		return nil
	}
	return out
}

func (h *host) borrowedIndices() []int32 {
	var out []int32
	for i, used := range h.gpuUsed {
		if used {
			out = append(out, int32(i))
		}
	}
	return out
}

func (h *host) fits(gpus int32) bool {
	if !h.placeable || h.executions >= h.maxExec || h.usedGPUs+gpus > h.maxGPUs || (gpus > 0 && h.freeIndices(gpus) == nil) {
		return false
	}
	// An execution's share is of its GPUs, or of the execution count for
	// one without: mixed, the shares alone would add up to more than lent.
	memoryMiB, milliCPUs := lending.ExecutionLimits(h.agreement, gpus)
	return h.usedMemoryMiB+memoryMiB <= h.agreement.MemoryMiB && h.usedMilliCPUs+milliCPUs <= h.agreement.MilliCPUs
}

func (h *host) take(project string, p placement) {
	for _, i := range p.gpus {
		if int(i) < len(h.gpuUsed) {
			h.gpuUsed[i] = true
		}
	}
	h.usedGPUs += int32(len(p.gpus))
	h.executions++
	h.usedMemoryMiB += p.memoryMiB
	h.usedMilliCPUs += p.milliCPUs
	h.usage.Add(project, int32(len(p.gpus)))
}

// write is one status change a pass decided.
type write struct {
	execution *nodusv1.Execution
	place     *placement
}

// Pass places what can be placed now and brings HostLendings up to date.
func (c *Controller) Pass(ctx context.Context) error {
	hosts, all, err := c.hosts()
	if err != nil {
		return err
	}
	// Each pool a pending execution names (or a placed one, whose pool the
	// cache says no longer lends to its project), read from etcd once per
	// pass: the cache may lag an operator's change, and a placement keeps
	// the pool's cap and network policy as they were when it was made.
	pools := map[string]*nodusv1.Pool{}
	// The nodes by alias are needed only for an execution placed on a host
	// that is not lent, or whose agent went silent: read once, and only then.
	var existing map[string]*nodusv1.Node
	nodeOf := func(alias string) (*nodusv1.Node, error) {
		if existing == nil {
			var err error
			if existing, err = c.aliases(); err != nil {
				return nil, err
			}
		}
		return existing[alias], nil
	}
	open, err := c.openIndex.ByIndex(indexOpen, executionOpen)
	if err != nil {
		return err
	}
	executions := make([]*nodusv1.Execution, 0, len(open))
	for _, obj := range open {
		executions = append(executions, obj.(*nodusv1.Execution))
	}
	claims, err := c.claims.list(ctx)
	if err != nil {
		return err
	}
	revoked, err := c.revokedBorrowers(ctx, executions, pools)
	if err != nil {
		return err
	}
	// borrowed is GPUs held per pool and borrowing project, placed the
	// executions placed (scheduled or running).
	borrowed, placed := map[[2]string]int32{}, map[[2]string]int32{}
	var pending []*nodusv1.Execution
	var writes []write
	now := metav1.NewTime(c.now().Truncate(time.Second))

	c.mu.Lock()
	seen := map[types.UID]bool{}
	for _, e := range executions {
		seen[e.UID] = true
		p, isAssumed := c.assumed[e.UID]
		if isAssumed && e.Status.Phase != nodusv1.ExecutionPending {
			delete(c.assumed, e.UID) // the cache caught up
			isAssumed = false
		}
		switch {
		case isAssumed:
			// Placed by an earlier pass; the cache does not show it yet.
		case e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning:
			p = placement{alias: e.Status.Host, gpus: e.Status.GPUIndices, memoryMiB: e.Status.MemoryLimitMiB, milliCPUs: e.Status.MilliCPUs}
		case e.Status.Phase == nodusv1.ExecutionPending || e.Status.Phase == "":
			pending = append(pending, e)
			continue
		default:
			continue
		}
		borrowed[[2]string{e.Spec.Pool, e.Namespace}] += int32(len(p.gpus))
		placed[[2]string{e.Spec.Pool, e.Namespace}]++
		h := hosts[p.alias]
		if h != nil {
			h.take(e.Namespace, p)
		}
		switch {
		case e.Status.Phase == nodusv1.ExecutionScheduled && !isAssumed && (h == nil || !lending.LentAt(h.reservation, now.Time)):
			// Withdrawn, released or ended before the agent started it.
			writes = append(writes, write{execution: drained(e, now)})
		case e.Status.Phase == nodusv1.ExecutionScheduled && !isAssumed && revoked[[2]string{e.Spec.Pool, e.Namespace}]:
			writes = append(writes, write{execution: notLentTo(e, now)})
		case e.Status.Phase == nodusv1.ExecutionRunning && !isAssumed && stoppable(e) && h != nil && !outlived(e, now.Time) &&
			revoked[[2]string{e.Spec.Pool, e.Namespace}]:
			// Its agent stops it and reports it drained, as after a
			// withdrawal; one whose agent confirms nothing is ended after
			// stopAfter (below, in a later pass).
			w := e.DeepCopy()
			w.Status.DrainRequestedAt = &now
			w.Status.Message = lending.DrainAsked(fmt.Sprintf("pool %s no longer lends to project %s", e.Spec.Pool, e.Namespace))
			writes = append(writes, write{execution: w})
		case (e.Status.Phase == nodusv1.ExecutionRunning || e.Status.Phase == nodusv1.ExecutionScheduled) && !isAssumed &&
			(outlived(e, now.Time) || stopUnconfirmed(e, now.Time) || (e.Status.Phase == nodusv1.ExecutionRunning && h == nil)):
			node, err := nodeOf(p.alias)
			if err != nil {
				c.mu.Unlock()
				return err
			}
			if end := endedByServer(e, node, now); end != nil {
				writes = append(writes, write{execution: end})
			}
		}
	}
	for uid := range c.assumed {
		if !seen[uid] {
			delete(c.assumed, uid)
		}
	}
	holding := map[string]placement{}
	for _, e := range executions {
		if p, ok := c.assumed[e.UID]; ok {
			holding[owner(e)] = p
		} else if e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning {
			holding[owner(e)] = placement{alias: e.Status.Host, gpus: e.Status.GPUIndices}
		}
	}
	c.mu.Unlock()
	if err := c.honourClaims(ctx, claims, holding, hosts, now.Time); err != nil {
		return err
	}

	byPool := map[string][]*host{}
	for _, h := range hosts {
		if h.placeable {
			byPool[h.pool] = append(byPool[h.pool], h)
		}
	}
	for _, list := range byPool {
		slices.SortFunc(list, func(a, b *host) int { return cmp.Compare(a.alias, b.alias) })
	}
	slices.SortFunc(pending, func(a, b *nodusv1.Execution) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, e := range pending {
		key := [2]string{e.Spec.Pool, e.Namespace}
		pool, err := c.poolNow(ctx, e.Spec.Pool, pools)
		if err != nil {
			return err
		}
		// Admission checked the borrower; the pool may have changed since.
		borrower, allowed := lending.Borrower(pool, e.Namespace)
		var why string
		var chosen *host
		switch {
		case !allowed:
			why = fmt.Sprintf("pool %s no longer lends to project %s", e.Spec.Pool, e.Namespace)
		case borrowed[key]+e.Spec.GPUs > borrower.MaxGPUs, borrower.MaxExecutions != nil && placed[key] >= *borrower.MaxExecutions:
			why = waitingFor(e, borrower)
		default:
			chosen = bestFit(byPool[e.Spec.Pool], e.Spec.GPUs)
			if chosen == nil {
				why = waitingFor(e, borrower)
			}
		}
		if chosen == nil {
			if e.Status.Reason != "Waiting" || e.Status.Message != why {
				w := e.DeepCopy()
				w.Status.Phase, w.Status.Reason, w.Status.Message = nodusv1.ExecutionPending, "Waiting", why
				writes = append(writes, write{execution: w})
			}
			continue
		}
		p := placement{alias: chosen.alias, gpus: chosen.freeIndices(e.Spec.GPUs)}
		// Its sandbox's limits: its share of what the owner lends.
		p.memoryMiB, p.milliCPUs = lending.ExecutionLimits(chosen.agreement, e.Spec.GPUs)
		chosen.take(e.Namespace, p)
		borrowed[key] += e.Spec.GPUs
		placed[key]++
		w := e.DeepCopy()
		w.Status.Phase, w.Status.Host, w.Status.GPUIndices, w.Status.ScheduledAt = nodusv1.ExecutionScheduled, p.alias, p.gpus, &now
		w.Status.MemoryLimitMiB, w.Status.MilliCPUs = p.memoryMiB, p.milliCPUs
		w.Status.Network = network(pool)
		w.Status.Reason, w.Status.Message = "Scheduled", fmt.Sprintf("placed on %s", p.alias)
		writes = append(writes, write{execution: w, place: &p})
	}
	if err := c.apply(ctx, writes); err != nil {
		return err
	}
	return c.project(ctx, all)
}

// owner names an execution in its GPU claims.
func owner(e *nodusv1.Execution) string { return e.Namespace + "/" + e.Name + "/" + string(e.UID) }

// honourClaims marks the GPUs claimed by executions this pass does not see
// holding them (placed by another scheduler, its status write not in the
// cache yet) as used, and releases the claims of executions that ended, are
// gone, or stayed pending well past their claim.
func (c *Controller) honourClaims(ctx context.Context, claims []claim, holding map[string]placement, hosts map[string]*host, now time.Time) error {
	for _, cl := range claims {
		if p, ok := holding[cl.owner]; ok && p.alias == cl.host && slices.Contains(p.gpus, cl.gpu) {
			continue // counted with its execution
		}
		release, err := c.claimEnded(ctx, cl, now)
		if err != nil {
			return err
		}
		if release {
			if err := c.claims.release(ctx, cl); err != nil {
				return err
			}
			continue
		}
		if h := hosts[cl.host]; h != nil && int(cl.gpu) < len(h.gpuUsed) && !h.gpuUsed[cl.gpu] {
			h.gpuUsed[cl.gpu] = true
			h.usedGPUs++
		}
	}
	return nil
}

// claimEnded says whether cl's execution no longer holds it, asking the
// API (not the cache) when the cache does not show it holding the GPU.
func (c *Controller) claimEnded(ctx context.Context, cl claim, now time.Time) (bool, error) {
	parts := strings.SplitN(cl.owner, "/", 3)
	if len(parts) != 3 {
		return true, nil // not a claim of ours
	}
	e, err := c.client.NodusV1().Executions(parts[0]).Get(ctx, parts[1], metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	case string(e.UID) != parts[2] || e.Status.Phase.Finished():
		return true, nil
	case e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning:
		return e.Status.Host != cl.host || !slices.Contains(e.Status.GPUIndices, cl.gpu), nil
	case now.Sub(cl.at) <= staleClaim:
		return false, nil
	}
	// Pending well past its claim. The scheduler that claimed may still
	// write its placement (paused, or its clock behind this one's, which
	// judged the claim's age): that write is conditional on the execution
	// as it read it, so a write here first makes it fail, and the GPUs
	// released next go to no second execution.
	fenced := e.DeepCopy()
	fenced.Status.Reason = "Waiting"
	fenced.Status.Message = fmt.Sprintf("its placement on %s, claimed at %s, did not complete; it is placed again", cl.host, cl.at.UTC().Format(time.RFC3339))
	if fenced.Status.Message == e.Status.Message {
		return true, nil // written already, by an earlier pass
	}
	_, err = c.client.NodusV1().Executions(e.Namespace).UpdateStatus(ctx, fenced, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) {
		return false, nil // changed meanwhile: judged again next pass
	}
	return err == nil, err
}

// waitingFor is the message of execution e waiting for room. It says what
// e waits for, not which of it holds e back now: that moves at every start
// and end in the pool (the borrower's use of its caps, the hosts' free
// GPUs), and each move would rewrite every waiting execution, up to a
// project's thousand of up to their size bound each, for a change no one
// waits on. How much of its caps a project holds, its executions show.
func waitingFor(e *nodusv1.Execution, borrower nodusv1.PoolBorrower) string {
	caps := fmt.Sprintf("%d GPUs", borrower.MaxGPUs)
	if borrower.MaxExecutions != nil {
		caps += fmt.Sprintf(" and %d executions", *borrower.MaxExecutions)
	}
	return fmt.Sprintf("waiting for room in pool %s: %d GPUs within project %s's cap of %s at once, on a lent host with the GPUs, an execution slot and the memory and CPUs of its share free",
		e.Spec.Pool, e.Spec.GPUs, e.Namespace, caps)
}

// bestFit is the host where the execution leaves the fewest lendable GPUs
// unused, so that big executions still find whole hosts.
func bestFit(candidates []*host, gpus int32) *host {
	var best *host
	for _, h := range candidates {
		if !h.fits(gpus) {
			continue
		}
		if best == nil || h.maxGPUs-h.usedGPUs < best.maxGPUs-best.usedGPUs {
			best = h
		}
	}
	return best
}

// aliases are the nodes there are, by host alias.
func (c *Controller) aliases() (map[string]*nodusv1.Node, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make(map[string]*nodusv1.Node, len(nodes))
	known := make(map[types.UID]string, len(nodes))
	for _, n := range nodes {
		alias := c.alias(n)
		known[n.UID] = alias
		out[alias] = n
	}
	c.aliasOf = known // forgets the nodes that are gone
	return out, nil
}

// alias is lending.HostAlias of n, remembered by UID: a pass may need the
// aliases of 10,000 nodes, and each is a SHA-256.
func (c *Controller) alias(n *nodusv1.Node) string {
	if a, ok := c.aliasOf[n.UID]; ok {
		return a
	}
	a := lending.HostAlias(n)
	if c.aliasOf == nil {
		c.aliasOf = map[types.UID]string{}
	}
	c.aliasOf[n.UID] = a
	return a
}

// revokedBorrowers are the pools and projects of placed executions
// (scheduled or running) whose pool no longer lends to their project: an
// operator took the project off its borrowers, closed the pool's lending
// or deleted the pool. Nothing of such a borrower starts or runs on there
// any more. The cache says which may be; etcd decides (poolNow), so that
// a cache behind an operator who just added a borrower drains nothing.
func (c *Controller) revokedBorrowers(ctx context.Context, executions []*nodusv1.Execution, pools map[string]*nodusv1.Pool) (map[[2]string]bool, error) {
	revoked := map[[2]string]bool{}
	for _, e := range executions {
		key := [2]string{e.Spec.Pool, e.Namespace}
		if _, known := revoked[key]; known || (e.Status.Phase != nodusv1.ExecutionScheduled && (e.Status.Phase != nodusv1.ExecutionRunning || !stoppable(e))) {
			continue // one already asked to stop is left to its agent: no read of etcd every pass until it reports
		}
		cached, err := c.pools.Get(e.Spec.Pool)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		if _, ok := lending.Borrower(cached, e.Namespace); ok {
			revoked[key] = false
			continue
		}
		pool, err := c.poolNow(ctx, e.Spec.Pool, pools)
		if err != nil {
			return nil, err
		}
		_, ok := lending.Borrower(pool, e.Namespace)
		revoked[key] = !ok
	}
	return revoked, nil
}

// stoppable says whether a running execution has been asked to stop by
// no one yet (a cancel or a drain).
func stoppable(e *nodusv1.Execution) bool {
	return e.Status.CancelRequestedAt == nil && e.Status.DrainRequestedAt == nil
}

// poolNow is the pool as stored now, or nil when there is none, remembered
// in seen for the rest of the pass. An operator who closes a pool's lending,
// lowers a cap or tightens a network policy must not see a placement made
// after the change follow the old pool from a lagging cache.
func (c *Controller) poolNow(ctx context.Context, name string, seen map[string]*nodusv1.Pool) (*nodusv1.Pool, error) {
	if p, ok := seen[name]; ok {
		return p, nil
	}
	p, err := c.client.NodusV1().Pools().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen[name] = p
	return p, nil
}

// network is pool's network policy: none unless it says egress.
func network(pool *nodusv1.Pool) nodusv1.LendingNetwork {
	if pool != nil && pool.Spec.Lending != nil && pool.Spec.Lending.Network == nodusv1.LendingNetworkEgress {
		return nodusv1.LendingNetworkEgress
	}
	return nodusv1.LendingNetworkNone
}

// The index of the reservations a pass reads, and its one value.
const indexLending, lendingAgreed = "scheduler.lending", "agreed"

// The index of the executions a pass reads, and its one value.
const indexOpen, executionOpen = "scheduler.open", "open"

// hosts are the hosts of every reservation with a lending agreement: all of
// them, and by alias the one that counts for each node (its holder, else the lent one).
func (c *Controller) hosts() (map[string]*host, []*host, error) {
	reservations, err := c.lendingIndex.ByIndex(indexLending, lendingAgreed)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*host{}
	ranks := map[string]int{} // by alias, of the host out holds
	var all []*host
	for _, obj := range reservations {
		r := obj.(*nodusv1.Reservation)
		node, err := c.nodes.Get(r.Status.Node)
		if apierrors.IsNotFound(err) {
			// The operator deleted the node: nothing runs there any more
			// (its running executions end as HostLost), so its owner's
			// HostLending must show it idle rather than its last use.
			all = append(all, &host{pool: c.lastPool(r), reservation: r,
				maxGPUs: r.Status.Lending.MaxGPUs, maxExec: r.Status.Lending.MaxExecutions, usage: lending.Usage{}})
			continue
		}
		if err != nil {
			continue
		}
		agreement := lending.HeldToHost(lending.WithHostShare(r.Status.Lending, &node.Status.Inventory), &node.Status.Inventory)
		h := &host{
			alias: c.alias(node), pool: node.Spec.Pool, reservation: r, agreement: agreement,
			maxGPUs: r.Status.Lending.MaxGPUs, maxExec: r.Status.Lending.MaxExecutions,
			gpuUsed: make([]bool, lending.GPUCount(node)), usage: lending.Usage{},
		}
		if slots := node.Status.ExecutionSlots; slots > 0 {
			h.maxExec = min(h.maxExec, slots) // the agent's slots may have shrunk since the lend
		}
		// A share still 0 (an agreement without caps, on a host whose agent
		// has not reported its inventory) would be no limit to the sandbox.
		// Only on the node the reservation holds: a machine enrolled under
		// the name of a deleted one is not the lender's until claimed.
		h.placeable = lending.LentAt(r, c.now()) && lifecycle.Holds(r, node) && !node.Spec.Maintenance &&
			meta.IsStatusConditionTrue(node.Status.Conditions, nodusv1.NodeConditionReady) &&
			agreement.MemoryMiB > 0 && agreement.MilliCPUs > 0
		all = append(all, h)
		// Of two reservations of one node (a former owner's, ended, and
		// the next owner's), the one that counts is the node's holder,
		// then a lent one: never the former owner's, whose HostLending
		// would show the next owner's borrowers. Not the order of the index.
		rank := 0
		switch {
		case lifecycle.Holds(r, node):
			rank = 2
		case lending.Lent(r):
			rank = 1
		}
		if _, ok := out[h.alias]; ok && ranks[h.alias] >= rank {
			continue
		}
		out[h.alias], ranks[h.alias] = h, rank
	}
	return out, all, nil
}

// lastPool is the pool the reservation's HostLending named while its node
// existed; the node was the only record of it.
func (c *Controller) lastPool(r *nodusv1.Reservation) string {
	if l, err := c.lendings.HostLendings(r.Spec.Project).Get(r.Name); err == nil {
		return l.Status.Pool
	}
	return ""
}

// apply writes the decided statuses, several at once. A conflict means the
// execution changed (cancelled, say): the next pass sees it anew.
func (c *Controller) apply(ctx context.Context, writes []write) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, writers)
	var mu sync.Mutex
	var firstErr error
	for _, w := range writes {
		if w.place != nil {
			c.mu.Lock()
			c.assumed[w.execution.UID] = *w.place
			c.mu.Unlock()
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(w write) {
			defer wg.Done()
			defer func() { <-sem }()
			forget := func() {
				c.mu.Lock()
				delete(c.assumed, w.execution.UID)
				c.mu.Unlock()
			}
			var made string // the claims this write made, which only it may release
			if w.place != nil {
				var taken bool
				var err error
				taken, made, err = c.claims.take(ctx, w.place.alias, w.place.gpus, owner(w.execution))
				if err != nil || !taken {
					// Another scheduler gave one of these GPUs away: the
					// next pass sees its claim.
					forget()
					c.poke()
					if err != nil {
						mu.Lock()
						firstErr = cmp.Or(firstErr, err)
						mu.Unlock()
					}
					return
				}
			}
			err := c.writeStatus(ctx, w)
			if err == nil {
				return
			}
			if w.place != nil {
				forget()
				// Only a refused write leaves the GPUs free. A write that
				// never got an answer may have landed: its claims stay, and
				// a later pass keeps them while the execution holds the
				// GPUs, or drops them once it surely does not (claimEnded).
				if outcome.Refused(err) && !c.placedAnyway(ctx, w, err) {
					if err := c.claims.releaseOwned(context.WithoutCancel(ctx), w.place.alias, w.place.gpus, made); err != nil {
						klog.ErrorS(err, "releasing GPU claims of a placement that was not written", "execution", w.execution.Namespace+"/"+w.execution.Name)
					}
				}
			}
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				c.poke()
				return
			}
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return firstErr
}

// placedAnyway says whether w's execution, whose status write was refused
// with err, may hold w's placement all the same: a conflict can be another
// scheduler's write of this very placement (an old leader and a new one
// deciding alike), which found this write's claims held by the execution
// and stands on them. Unless the execution as stored shows otherwise, the
// claims stay; a later pass drops them once the execution surely does not
// hold them (claimEnded).
func (c *Controller) placedAnyway(ctx context.Context, w write, err error) bool {
	if !apierrors.IsConflict(err) {
		return false
	}
	stored, getErr := c.client.NodusV1().Executions(w.execution.Namespace).Get(context.WithoutCancel(ctx), w.execution.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(getErr):
		return false
	case getErr != nil:
		return true
	}
	return stored.UID == w.execution.UID && holds(stored, *w.place)
}

// A placement whose write got no answer is written again after
// lostAnswerWait, then after twice as long, up to lostAnswerMaxWait
// between writes, for lostAnswerFor in all: etcd electing a leader takes
// a second or two, and the pass waits for its writes.
const (
	lostAnswerWait    = 200 * time.Millisecond
	lostAnswerMaxWait = time.Second
	lostAnswerFor     = 10 * time.Second
)

// writeStatus writes w's status. A placement whose write got no answer (a
// 5xx, a timeout) may have landed, or may not: it is written again, under
// the same resourceVersion, until an answer tells. If the first landed, the
// next conflicts, and the execution as stored shows the placement: that is
// success. If not, the next lands, or is refused, and then the first never
// can land: its precondition is gone. Either way the claims are released
// only when the placement surely did not happen.
func (c *Controller) writeStatus(ctx context.Context, w write) error {
	executions := c.client.NodusV1().Executions(w.execution.Namespace)
	options := metav1.UpdateOptions{FieldManager: fieldManager}
	_, err := executions.UpdateStatus(ctx, w.execution, options)
	if w.place == nil || err == nil || outcome.Refused(err) {
		return err
	}
	deadline := time.Now().Add(lostAnswerFor)
	for wait := lostAnswerWait; time.Now().Before(deadline); wait = min(2*wait, lostAnswerMaxWait) {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		if _, err = executions.UpdateStatus(ctx, w.execution, options); err == nil || outcome.Refused(err) {
			break
		}
	}
	if !apierrors.IsConflict(err) {
		return err
	}
	stored, getErr := executions.Get(ctx, w.execution.Name, metav1.GetOptions{})
	switch {
	case getErr != nil && !apierrors.IsNotFound(getErr):
		return getErr // still unknown: the claims stay
	case getErr == nil && stored.UID == w.execution.UID && holds(stored, *w.place):
		return nil // the first write landed
	}
	return err
}

// holds says whether e, as stored, is placed on exactly p's GPUs.
func holds(e *nodusv1.Execution, p placement) bool {
	placed := e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning
	return placed && e.Status.Host == p.alias && slices.Equal(slices.Sorted(slices.Values(e.Status.GPUIndices)), slices.Sorted(slices.Values(p.gpus)))
}
