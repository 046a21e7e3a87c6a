// Package allocation claims nodes for Allocations. The claim is a write of
// the Node's status.allocation under optimistic concurrency: of two claims
// of one node, by this replica or another, only one can succeed, so no node
// is ever in two allocations.
package allocation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/nodeindex"
	"github.com/nodus-dev/nodus/pkg/controller/worker"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	listers "github.com/nodus-dev/nodus/pkg/generated/listers/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/outcome"
)

// Controller processes allocations that are still allocating.
type Controller struct {
	client      versioned.Interface
	allocations listers.AllocationLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	index       *freeIndex
	rndMu       sync.Mutex
	rnd         *rand.Rand
	// waiting are the reservations' allocations no node is free for, by
	// name, with their class: a node of it whose standing changes takes
	// them back to the queue.
	waitMu  sync.Mutex
	waiting map[string]string
	// Writes are its status writes: through client unless the server
	// writes them in process (package localwrite).
	Writes Writes
}

// Writes are the controller's status writes of Nodes (the claims) and of
// Allocations, each under the object's resourceVersion, as the manager
// FieldManager.
type Writes struct {
	NodeStatus       func(context.Context, *nodusv1.Node) (*nodusv1.Node, error)
	AllocationStatus func(context.Context, *nodusv1.Allocation) (*nodusv1.Allocation, error)
}

// FieldManager names the controller's writes.
const FieldManager = "nodus-allocation-controller"

// ClientWrites are Writes through client.
func ClientWrites(client versioned.Interface) Writes {
	options := metav1.UpdateOptions{FieldManager: FieldManager}
	return Writes{
		NodeStatus: func(ctx context.Context, n *nodusv1.Node) (*nodusv1.Node, error) {
			return client.NodusV1().Nodes().UpdateStatus(ctx, n, options)
		},
		AllocationStatus: func(ctx context.Context, a *nodusv1.Allocation) (*nodusv1.Allocation, error) {
			return client.NodusV1().Allocations().UpdateStatus(ctx, a, options)
		},
	}
}

// LabelReservation is on an allocation a reservation placed by resource
// class made (the reservation controller's): it waits for a free node,
// where an allocation an Ironic client made fails, as Ironic's does.
const LabelReservation = "nodus.dev/reservation"

// waitRecheck is how often an allocation that waits looks again, should a
// node's becoming free not reach it.
const waitRecheck = 30 * time.Second

// New wires the controller to factory's informers.
func New(client versioned.Interface, factory externalversions.SharedInformerFactory) (*Controller, error) {
	v1 := factory.Nodus().V1()
	c := &Controller{
		client:      client,
		allocations: v1.Allocations().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "allocations"}),
		index:   newFreeIndex(),
		rnd:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)),
		waiting: map[string]string{},
		Writes:  ClientWrites(client),
	}
	nodeInformer := v1.Nodes().Informer()
	if err := nodeindex.AddByAllocation(nodeInformer); err != nil {
		return nil, err
	}
	claims := nodeInformer.GetIndexer()
	enqueue := func(obj interface{}) {
		a, ok := obj.(*nodusv1.Allocation)
		if !ok {
			return
		}
		if allocating(a) {
			c.queue.Add(a.Name)
		}
		// Settled: a claim it did not take, landed before, is an orphan now.
		nodes, _ := claims.ByIndex(nodeindex.ByAllocation, a.Name)
		for _, obj := range nodes {
			if n := obj.(*nodusv1.Node); orphaned(n, a) {
				c.queue.Add(nodeKeyPrefix + n.Name)
			}
		}
	}
	informer := v1.Allocations().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if a, ok := obj.(*nodusv1.Allocation); ok {
				c.waitMu.Lock()
				delete(c.waiting, a.Name)
				c.waitMu.Unlock()
				// Its delete clears its node's claim, but a server that
				// stopped between the two writes did not, and the node
				// shows no change to wake the check below.
				nodes, _ := claims.ByIndex(nodeindex.ByAllocation, a.Name)
				for _, obj := range nodes {
					c.queue.Add(nodeKeyPrefix + obj.(*nodusv1.Node).Name)
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	// A node naming an allocation the cache does not have, or has settled
	// on another node, may be an orphan (see orphaned).
	orphan := func(obj interface{}) {
		n, ok := obj.(*nodusv1.Node)
		if !ok || n.Status.Allocation == "" {
			return
		}
		a, err := c.allocations.Get(n.Status.Allocation)
		if apierrors.IsNotFound(err) || (err == nil && orphaned(n, a)) {
			c.queue.Add(nodeKeyPrefix + n.Name)
		}
	}
	// A waiting allocation looks again whenever a node of its class
	// changes its standing: one that became free ends the wait, any other
	// change may change why it waits (status.lastError must say the
	// reason of now, not of its first look).
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if n, ok := obj.(*nodusv1.Node); ok {
				c.index.update(n)
				orphan(n)
				c.wake(n.Spec.ResourceClass)
			}
		},
		UpdateFunc: func(oldObj, obj interface{}) {
			n, ok := obj.(*nodusv1.Node)
			if !ok {
				return
			}
			c.index.update(n)
			orphan(n)
			if old, ok := oldObj.(*nodusv1.Node); !ok || old.Spec.ResourceClass != n.Spec.ResourceClass || standing(old) != standing(n) {
				if ok {
					c.wake(old.Spec.ResourceClass)
				}
				c.wake(n.Spec.ResourceClass)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if n, ok := obj.(*nodusv1.Node); ok {
				c.index.remove(n.Name)
				c.wake(n.Spec.ResourceClass)
			}
		},
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{informer.HasSynced, nodeInformer.HasSynced}
	return c, nil
}

// nodeKeyPrefix marks a queue key that names a node to check for an orphaned
// claim (allocation names have no "/").
const nodeKeyPrefix = "node/"

// orphaned says whether node n's claim of allocation a is one a did not
// take: a settled (active, or failed) on no node or another one. Two
// controllers at once (an old leader that has not noticed yet) may each
// claim a node for one allocation; the one whose status write lost leaves
// its claim behind, for ever unless freed.
func orphaned(n *nodusv1.Node, a *nodusv1.Allocation) bool {
	if !n.Status.ClaimedByAllocation(a) {
		return true // an earlier allocation's of the name
	}
	settled := a.Status.State == nodusv1.AllocationStateActive || a.Status.State == nodusv1.AllocationStateError
	return settled && a.Status.Node != n.Name
}

// repairOrphan frees node when the allocation it names does not exist in
// etcd, is another of its name, or has settled on another node: the cache
// may lag behind, etcd does not.
func (c *Controller) repairOrphan(ctx context.Context, node string) error {
	n, err := c.client.NodusV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && n.Status.Allocation == "") {
		return nil
	}
	if err != nil {
		return err
	}
	a, err := c.client.NodusV1().Allocations().Get(ctx, n.Status.Allocation, metav1.GetOptions{})
	switch {
	case err == nil && orphaned(n, a):
		klog.InfoS("freeing a node whose allocation settled on another", "node", node, "allocation", a.Name, "allocationNode", a.Status.Node)
	case err == nil:
		return nil // the allocation's own, or one still allocating
	case !apierrors.IsNotFound(err):
		return err // we cannot tell
	default:
		klog.InfoS("freeing a node whose allocation no longer exists", "node", node, "allocation", n.Status.Allocation)
	}
	freed := n.DeepCopy()
	freed.Status.Allocation, freed.Status.AllocationUID = "", ""
	// A conflict means the node changed meanwhile: the next event looks again.
	_, err = c.Writes.NodeStatus(ctx, freed)
	return err
}

func allocating(a *nodusv1.Allocation) bool {
	return a.DeletionTimestamp == nil && (a.Status.State == "" || a.Status.State == nodusv1.AllocationStateAllocating)
}

// Run processes allocations until ctx ends. Allocations left allocating by
// a restart are picked up by the informer's initial list.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		c.queue.ShutDown()
		return
	}
	klog.InfoS("allocation controller started")
	worker.Run(ctx, c.queue, workers, "allocations", c.sync)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	if node, ok := strings.CutPrefix(name, nodeKeyPrefix); ok {
		return c.repairOrphan(ctx, node)
	}
	a, err := c.allocations.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !allocating(a)) {
		// A claim of it that got no answer no longer keeps its node out:
		// if it landed, the node names an allocation that is gone or
		// done, and the cache shows it (orphan).
		if claimed, ok := c.index.unansweredOf(name); ok {
			c.index.untake(claimed.Name)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if claimed, ok := c.index.unansweredOf(a.Name); ok {
		landed, err := c.settleUnanswered(ctx, claimed, a.Name)
		if err != nil {
			return err
		}
		if landed {
			return c.finish(ctx, a, claimed.Name, "")
		}
	}
	// A claim made before a restart or a failed status write is finished
	// first. The cache may still show the claim of a deleted allocation of
	// the same name (its node is freed after the delete): only the node as
	// stored now says whether the claim is there.
	if n, ok := c.index.holderOf(a.Name); ok {
		stored, err := c.client.NodusV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err == nil && stored.Status.ClaimedByAllocation(a) {
			return c.finish(ctx, a, n.Name, "")
		}
		if err == nil && stored.Status.Allocation == a.Name {
			// An earlier allocation's of the name, deleted a moment ago
			// (its delete frees the node next), or before the delete's
			// node write failed: never taken over, freed.
			c.queue.Add(nodeKeyPrefix + n.Name)
			return fmt.Errorf("node %s holds the claim of an earlier allocation %s (UID %s)", n.Name, a.Name, stored.Status.AllocationUID)
		}
		return fmt.Errorf("node %s still shows a claim of an earlier allocation %s in the cache", n.Name, a.Name)
	}
	// A conflict moves on to the next candidate, up to claimTries; then
	// the allocation goes back to the queue.
	tried := map[string]bool{}
	for range claimTries {
		node, lastError := c.choose(a, tried)
		if node == nil && lastError == "" {
			return fmt.Errorf("allocation %s: the free nodes of class %q are being claimed", a.Name, a.Spec.ResourceClass)
		}
		if node == nil && len(tried) > 0 && (a.Spec.Node != "" || len(a.Spec.CandidateNodes) > 0) {
			// The nodes it names were tried and changed under the claim
			// (a conflict says nothing of who holds them): looked at
			// again with the cache as it is then, never failed for it.
			return fmt.Errorf("allocation %s: its nodes changed while being claimed", a.Name)
		}
		if node == nil && a.Labels[LabelReservation] != "" {
			return c.wait(ctx, a, lastError)
		}
		if node == nil {
			return c.finish(ctx, a, "", lastError)
		}
		claimed := node.DeepCopy()
		claimed.Status.Allocation, claimed.Status.AllocationUID = a.Name, a.UID
		written, err := c.Writes.NodeStatus(ctx, claimed)
		if err == nil {
			c.index.claimed(node.Name, a.Name, resourceVersion(written))
			return c.finish(ctx, a, node.Name, "")
		}
		if !outcome.Refused(err) {
			// The claim may have landed: the node stays out until the
			// retry knows (settleUnanswered).
			c.index.unansweredClaim(claimed, a.Name)
			return err
		}
		c.index.untake(node.Name)
		if !apierrors.IsConflict(err) {
			return err
		}
		// Another claim (or any change) won the race.
		tried[node.Name] = true
	}
	return fmt.Errorf("allocation %s: %d nodes changed while being claimed", a.Name, claimTries)
}

// settleUnanswered finds out whether claimed, a claim of allocation whose
// write got no answer, landed: it writes the claim again, under the same
// resourceVersion. If the first landed, this one conflicts, and the node as
// stored names the allocation. If not, this one lands, or is refused, and
// then the first never can land: its precondition is gone. A claim that did
// not land gives its node back; one still without an answer stays.
func (c *Controller) settleUnanswered(ctx context.Context, claimed *nodusv1.Node, allocation string) (bool, error) {
	written, err := c.Writes.NodeStatus(ctx, claimed)
	if err == nil {
		c.index.claimed(claimed.Name, allocation, resourceVersion(written))
		return true, nil
	}
	if !outcome.Refused(err) {
		return false, err
	}
	if apierrors.IsConflict(err) {
		stored, getErr := c.client.NodusV1().Nodes().Get(ctx, claimed.Name, metav1.GetOptions{})
		if getErr != nil && !apierrors.IsNotFound(getErr) {
			return false, getErr
		}
		if getErr == nil && stored.UID == claimed.UID && stored.Status.Allocation == allocation && stored.Status.AllocationUID == claimed.Status.AllocationUID {
			c.index.claimed(claimed.Name, allocation, resourceVersion(stored))
			return true, nil
		}
	}
	c.index.untake(claimed.Name)
	return false, nil
}

// claimTries bounds the claims of one pass of an allocation.
const claimTries = 8

// choose takes the node for a from the index: by class, at random, the
// node of a's Ironic name first. Candidates and backfills look up their few
// nodes. Only when no node fits is every node looked at, to say which
// constraint emptied the field.
func (c *Controller) choose(a *nodusv1.Allocation, tried map[string]bool) (*nodusv1.Node, string) {
	var field []*nodusv1.Node
	switch {
	case a.Spec.Node != "" || len(a.Spec.CandidateNodes) > 0:
		for _, ident := range append([]string{a.Spec.Node}, a.Spec.CandidateNodes...) {
			if n, ok := c.index.lookup(ident); ok && ident != "" && !tried[n.Name] {
				field = append(field, n)
			}
		}
	default:
		c.rndMu.Lock()
		n := c.index.take(a, c.rnd, tried)
		c.rndMu.Unlock()
		if n != nil {
			return n, ""
		}
		// Nothing to take: say why. "" (a node that looks free in the
		// cache is being claimed, or was a moment ago) asks again later
		// rather than fail the allocation.
		return nil, c.index.whyNoneFree(a)
	}
	c.rndMu.Lock()
	node, lastError := choose(a, field, c.rnd)
	c.rndMu.Unlock()
	if node == nil && a.Spec.Node == "" && len(a.Spec.CandidateNodes) > 0 {
		// Say why as the fleet does: the candidates may be of another class.
		lastError = c.index.whyNoneFree(a)
		if lastError == "" {
			lastError = fmt.Sprintf("none of the candidate nodes %s is free", strings.Join(a.Spec.CandidateNodes, ", "))
		}
	}
	return node, lastError
}

// wait keeps a reservation's allocation allocating while no node is free
// for it, saying why (status.lastError): the reservation waits for a node
// of its class, and looks again when one changes its standing.
func (c *Controller) wait(ctx context.Context, a *nodusv1.Allocation, why string) error {
	c.waitMu.Lock()
	c.waiting[a.Name] = a.Spec.ResourceClass
	c.waitMu.Unlock()
	c.queue.AddAfter(a.Name, waitRecheck)
	if a.Status.State == nodusv1.AllocationStateAllocating && a.Status.LastError == why {
		return nil
	}
	next := a.DeepCopy()
	next.Status = nodusv1.AllocationStatus{State: nodusv1.AllocationStateAllocating, LastError: why}
	_, err := c.Writes.AllocationStatus(ctx, next)
	return err
}

// wake takes the allocations waiting for a node of class back to the queue.
func (c *Controller) wake(class string) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	for name, waitsFor := range c.waiting {
		if waitsFor == class {
			delete(c.waiting, name)
			c.queue.Add(name)
		}
	}
}

func (c *Controller) finish(ctx context.Context, a *nodusv1.Allocation, node, lastError string) error {
	next := a.DeepCopy()
	next.Status = nodusv1.AllocationStatus{State: nodusv1.AllocationStateActive, Node: node}
	if node == "" {
		next.Status = nodusv1.AllocationStatus{State: nodusv1.AllocationStateError, LastError: lastError}
	}
	_, err := c.Writes.AllocationStatus(ctx, next)
	return err
}
