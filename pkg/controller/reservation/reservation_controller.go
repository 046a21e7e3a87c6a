// Package reservation keeps every Reservation's lifecycle and epoch, and its
// customer-safe projection, the ReservedHost of the same name in the
// project's namespace.
package reservation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
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
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
)

// Controller reconciles Reservations.
type Controller struct {
	client       versioned.Interface
	reservations listers.ReservationLister
	nodes        listers.NodeLister
	// The informers' indexes answer "which reservations does this event
	// concern" without a walk over every reservation (index.go).
	nodeIndex        cache.Indexer
	hostIndex        cache.Indexer
	reservationIndex cache.Indexer
	allocationIndex  cache.Indexer
	allocations      listers.AllocationLister
	hosts            listers.ReservedHostLister
	projects         listers.ProjectLister
	synced           []cache.InformerSynced
	queue            workqueue.TypedRateLimitingInterface[string]
	now              func() time.Time

	// finalEpochs are the highest epochs reservations had, by name, until
	// forget hands a deleted one's nodes over: the cleaning request names it, and the
	// agent retires the reservation at it, so that an epoch rise that
	// reaches the agent after the request grants nothing again.
	finalMu     sync.Mutex
	finalEpochs map[string]int64

	// PredatesProject says whether the reservation's etcd key was made
	// before its project's: then it is an earlier project's of the name.
	// Nil: not asked (then only a reservation whose project is missing is
	// retired as an orphan).
	PredatesProject func(ctx context.Context, reservation, project string) (bool, error)
}

// New wires the controller to the informers of factory.
func New(client versioned.Interface, factory externalversions.SharedInformerFactory) (*Controller, error) {
	v1 := factory.Nodus().V1()
	c := &Controller{
		client:       client,
		reservations: v1.Reservations().Lister(),
		nodes:        v1.Nodes().Lister(),
		allocations:  v1.Allocations().Lister(),
		hosts:        v1.ReservedHosts().Lister(),
		projects:     v1.Projects().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "reservations"}),
		now: time.Now,
	}
	if err := addIndexes(v1.Nodes().Informer(), v1.Reservations().Informer(), v1.Allocations().Informer(), v1.ReservedHosts().Informer()); err != nil {
		return nil, err
	}
	c.hostIndex = v1.ReservedHosts().Informer().GetIndexer()
	c.nodeIndex = v1.Nodes().Informer().GetIndexer()
	c.reservationIndex = v1.Reservations().Informer().GetIndexer()
	c.allocationIndex = v1.Allocations().Informer().GetIndexer()
	handlers := []struct {
		informer cache.SharedIndexInformer
		keys     func(obj interface{}) []string
	}{
		{v1.Reservations().Informer(), func(obj interface{}) []string {
			// For a delete too: the epoch is kept before the name is
			// queued, and the highest counts.
			if r, ok := tombstone(obj).(*nodusv1.Reservation); ok {
				c.noteEpoch(r)
			}
			return []string{objectName(obj)}
		}},
		{v1.Nodes().Informer(), c.nodeKeys},
		{v1.Allocations().Informer(), func(obj interface{}) []string { return c.reservationsBy(indexAllocation, objectName(obj)) }},
		{v1.Projects().Informer(), func(obj interface{}) []string { return c.reservationsBy(indexProject, objectName(obj)) }},
		{v1.ReservedHosts().Informer(), func(obj interface{}) []string {
			if h, ok := tombstone(obj).(*nodusv1.ReservedHost); ok && h.Labels[LabelReservation] != "" {
				return []string{h.Labels[LabelReservation]}
			}
			return nil
		}},
	}
	for _, h := range handlers {
		keys := h.keys
		enqueue := func(obj interface{}) {
			for _, k := range keys(obj) {
				c.queue.Add(k)
			}
		}
		if _, err := h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
			DeleteFunc: enqueue,
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, h.informer.HasSynced)
	}
	return c, nil
}

// Run processes the queue with workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		c.queue.ShutDown()
		return
	}
	klog.InfoS("reservation controller started")
	worker.Run(ctx, c.queue, workers, "reservations", c.sync)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	r, err := c.reservations.Get(name)
	if apierrors.IsNotFound(err) {
		// Gone from this cache; forget asks etcd before it retires anything.
		return c.forget(ctx, name)
	}
	if err != nil {
		return err
	}
	if forgotten, err := c.forgetEarlier(ctx, r); err != nil || forgotten {
		if forgotten {
			// Not at once: a delete a finalizer holds "succeeds" and leaves
			// the object, and would requeue at once for ever. The deletes'
			// events requeue it anyway.
			c.queue.AddAfter(name, time.Second)
		}
		return err
	}
	o := observed{now: c.now(), reservation: r}
	o.allocation, err = c.allocation(ctx, r)
	if errors.Is(err, errAllocationNotOwn) {
		o.allocationTaken, err = true, nil
	}
	if err != nil {
		return err
	}
	if o.node, err = c.node(r.Status.Node); err != nil {
		return err
	}
	if placed := placedNode(o); placed != "" && placed != r.Status.Node {
		if o.target, err = c.node(placed); err != nil {
			return err
		}
		if o.node == nil {
			o.node, o.target = o.target, nil
		}
	}
	if o.held, err = c.heldBy(name); err != nil {
		return err
	}
	if o.host, err = c.hosts.ReservedHosts(r.Spec.Project).Get(r.Name); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if o.project, err = c.projects.Get(r.Spec.Project); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if o.project == nil {
		if gone, err := c.retireOrphan(ctx, r); err != nil || gone {
			return err
		}
	} else if gone, err := c.retireEarlierProjects(ctx, r, o.project); err != nil || gone {
		return err
	}
	d := reconcile(o)
	if d.lostNode != "" {
		// The cache may lag a claim of r's own (the lead passed from the
		// replica that wrote it): only what etcd holds ends its access.
		fresh, err := c.client.NodusV1().Nodes().Get(ctx, d.lostNode, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err != nil || fresh.Status.Reservation == "" || lifecycle.Holds(r, fresh) {
			klog.InfoS("not ending a reservation: the cache shows its node held by another, etcd does not", "reservation", name, "node", d.lostNode)
			c.queue.AddAfter(name, time.Second)
			return nil
		}
	}
	if d.claim != nil {
		// The claim is the store's: a conflict (another claim, or any change
		// since the cache saw the node) fails the write, and we try again.
		if _, err := c.client.NodusV1().Nodes().UpdateStatus(ctx, d.claim, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
		c.queue.Add(name)
		return nil
	}

	if d.status != nil {
		next := r.DeepCopy()
		next.Status = *d.status
		if _, err := c.client.NodusV1().Reservations().UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
	}
	if err := c.writeHost(ctx, o.host, d.host); err != nil {
		return err
	}
	if err := c.handOver(ctx, d.handovers); err != nil {
		return err
	}
	if d.releaseAlloc && o.allocation != nil && !madeAfterTheEnd(o.allocation, r) {
		uid := o.allocation.UID
		err := c.client.NodusV1().Allocations().Delete(ctx, o.allocation.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if otherUID(err) {
			err = nil // another allocation under the name since: not this reservation's
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if d.requeue > 0 {
		c.queue.AddAfter(name, d.requeue+time.Second)
	}
	return nil
}

const fieldManager = "nodus-reservation-controller"

// madeAfterTheEnd says whether allocation a was created after reservation
// r was released or ended: another allocation under the name r once used,
// which r, staying as a record, must leave alone.
func madeAfterTheEnd(a *nodusv1.Allocation, r *nodusv1.Reservation) bool {
	end := r.Status.EndedAt
	if r.Status.Release != nil {
		end = &r.Status.Release.RequestedAt
	}
	return end != nil && a.CreationTimestamp.After(end.Time)
}

// node reads a node from the cache; nil when name is empty or unknown.
func (c *Controller) node(name string) (*nodusv1.Node, error) {
	if name == "" {
		return nil, nil
	}
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return n, err
}

// heldBy lists the nodes whose claim names reservation.
func (c *Controller) heldBy(reservation string) ([]*nodusv1.Node, error) {
	return byIndex[*nodusv1.Node](c.nodeIndex, indexReservation, reservation)
}

// byIndex lists the objects of indexer whose index holds value.
func byIndex[T any](indexer cache.Indexer, index, value string) ([]T, error) {
	objs, err := indexer.ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(T))
	}
	return out, nil
}

// handOver writes the nodes a reservation let go, each with its cleaning
// request, under the resourceVersion the cache saw.
func (c *Controller) handOver(ctx context.Context, nodes []*nodusv1.Node) error {
	for _, n := range nodes {
		if _, err := c.client.NodusV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return err
		}
	}
	return nil
}

// forget retires what a deleted reservation leaves: its ReservedHost, its
// own allocation, and its claims, whose nodes go to cleaning as after a
// release.
func (c *Controller) forget(ctx context.Context, name string) error {
	hosts, err := c.hostsLabelled(name)
	if err != nil {
		return err
	}
	var users []string
	epoch := c.finalEpoch(name)
	for _, h := range hosts {
		users = append(users, h.Status.Reservation.LoginUser)
		// What it showed last: the final epoch, or near it, also for a
		// controller that took the lead after the deletion.
		epoch = max(epoch, h.Status.Reservation.Epoch)
	}
	held, err := c.heldBy(name)
	if err != nil {
		return err
	}
	// The allocation a class placement made for it would hold the node for
	// ever: only a released or ended reservation lets it go otherwise.
	owned, err := c.allocationsLabelled(name)
	if err != nil {
		return err
	}
	// Asked of etcd, after the caches were read: the node and host caches
	// may show a live reservation's claim and host before the reservation's
	// own cache shows it (three watches), and a reservation made again
	// under the name while this replica paused (another led meanwhile) may
	// have claimed a node, a host and an allocation the caches now show
	// under the name. What the caches show was written after such a
	// reservation existed, so etcd shows it: its own sync takes over (and
	// retires what a deleted one left, by UID: forgetEarlier).
	if _, err := c.client.NodusV1().Reservations().Get(ctx, name, metav1.GetOptions{}); err == nil {
		klog.InfoS("not forgetting a reservation: one of its name exists again", "reservation", name)
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	var handovers []*nodusv1.Node
	for _, n := range held {
		handovers = append(handovers, lifecycle.Handover(n, name, epoch, users, c.now()))
	}
	if err := c.handOver(ctx, handovers); err != nil {
		return err
	}
	c.finalMu.Lock()
	delete(c.finalEpochs, name)
	c.finalMu.Unlock()
	for _, a := range owned {
		uid := a.UID // not another allocation made since under the name
		err := c.client.NodusV1().Allocations().Delete(ctx, a.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !otherUID(err) {
			return err
		}
	}
	for _, h := range hosts {
		// Not a host made since for a reservation made again under the
		// name (this leader may have paused, and another led meanwhile).
		uid := h.UID
		err := c.client.NodusV1().ReservedHosts(h.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !otherUID(err) {
			return err
		}
	}
	return nil
}

// forgetEarlier retires what an earlier reservation of r's name left: one
// deleted, and r made under its name, before this controller saw it go (the
// lead passing between replicas in between), so that forget never ran for
// it. Its claims name another UID; its ReservedHost is in another project,
// or is in r's and not r's (earlierHost); its own allocation
// carries another UID's label or, made before that label, predates r. Its
// nodes go to cleaning before r may claim them. It says whether it wrote
// anything.
func (c *Controller) forgetEarlier(ctx context.Context, r *nodusv1.Reservation) (bool, error) {
	hosts, err := c.hostsLabelled(r.Name)
	if err != nil {
		return false, err
	}
	var users []string
	var earlierHosts []*nodusv1.ReservedHost
	for _, h := range hosts {
		earlier := h.Namespace != r.Spec.Project
		if !earlier {
			if earlier, err = c.earlierHost(ctx, h, r); err != nil {
				return false, err
			}
		}
		if earlier {
			users = append(users, h.Status.Reservation.LoginUser)
			earlierHosts = append(earlierHosts, h)
		}
	}
	held, err := c.heldBy(r.Name)
	if err != nil {
		return false, err
	}
	var handovers []*nodusv1.Node
	for _, n := range held {
		if !lifecycle.Holds(r, n) {
			klog.InfoS("handing over a node an earlier reservation of the name still holds", "reservation", r.Name, "uid", r.UID,
				"node", n.Name, "claimUID", n.Status.ReservationUID)
			handovers = append(handovers, lifecycle.Handover(n, r.Name, 0, users, c.now()))
		}
	}
	if err := c.handOver(ctx, handovers); err != nil {
		return false, err
	}
	wrote := len(handovers) > 0
	allocations, err := c.allocationsLabelled(r.Name)
	if err != nil {
		return false, err
	}
	for _, a := range allocations {
		if !earlierAllocation(a, r) {
			continue
		}
		uid := a.UID
		err := c.client.NodusV1().Allocations().Delete(ctx, a.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			wrote = true
		case !apierrors.IsNotFound(err) && !otherUID(err):
			return false, err
		}
	}
	for _, h := range earlierHosts {
		uid := h.UID
		err := c.client.NodusV1().ReservedHosts(h.Namespace).Delete(ctx, h.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			wrote = true
		case !apierrors.IsNotFound(err) && !otherUID(err):
			return false, err
		}
	}
	return wrote, nil
}

// otherUID says whether a delete under a UID precondition found another
// object of the name. Not any 409: an allocation that holds an active node
// answers NodeActive, which must be retried, not taken for gone.
func otherUID(err error) bool {
	return apierrors.ReasonForError(err) == metav1.StatusReasonConflict
}

// earlierHost says whether h, the ReservedHost in r's project under r's
// name, is an earlier reservation's. Taken over, it would show that one's
// epochs and release, and refuse r's writes (an epoch that decreases, a
// released term that changes). It is when it predates r (the controller
// makes r's host after r; times are kept to the second), or when it is
// ahead of r where r's own host never is: at a higher epoch, or with
// access ending while r's goes on. r's host is written after r, so the
// second rule is judged on r as etcd holds it: a cache may show the host
// before the reservation's write that it follows.
func (c *Controller) earlierHost(ctx context.Context, h *nodusv1.ReservedHost, r *nodusv1.Reservation) (bool, error) {
	if h.CreationTimestamp.Before(&r.CreationTimestamp) {
		return true, nil
	}
	ahead := func(r *nodusv1.Reservation) bool {
		hs := h.Status.Reservation
		return hs.Epoch > r.Status.Epoch || (accessEnding(hs.State) && !accessEnding(r.Status.State))
	}
	if !ahead(r) {
		return false, nil
	}
	fresh, err := c.client.NodusV1().Reservations().Get(ctx, r.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && fresh.UID != r.UID) {
		return false, nil // gone or made again since: its own sync decides
	}
	if err != nil {
		return false, err
	}
	return ahead(fresh), nil
}

// accessEnding says whether a reservation in state s gives access no more,
// or is retiring it.
func accessEnding(s nodusv1.ReservationState) bool {
	switch s {
	case nodusv1.ReservationStateReleasing, nodusv1.ReservationStateReleased, nodusv1.ReservationStateEnding, nodusv1.ReservationStateEnded:
		return true
	}
	return false
}

// hostsLabelled are the ReservedHosts whose label names reservation.
func (c *Controller) hostsLabelled(reservation string) ([]*nodusv1.ReservedHost, error) {
	return byIndex[*nodusv1.ReservedHost](c.hostIndex, indexLabelReservation, reservation)
}

// allocationsLabelled are the allocations whose label names reservation.
func (c *Controller) allocationsLabelled(reservation string) ([]*nodusv1.Allocation, error) {
	return byIndex[*nodusv1.Allocation](c.allocationIndex, indexLabelReservation, reservation)
}

// earlierAllocation says whether a, labelled with r's name, is an earlier
// reservation's of that name: its UID label says so, or, made before the
// label existed, it predates r (the controller makes r's after r).
func earlierAllocation(a *nodusv1.Allocation, r *nodusv1.Reservation) bool {
	if uid, ok := a.Labels[LabelReservationUID]; ok {
		return uid != string(r.UID)
	}
	return a.CreationTimestamp.Before(&r.CreationTimestamp)
}

// errAllocationNotOwn: the allocation a resource-class placement would make
// exists, and was not made for this reservation.
var errAllocationNotOwn = errors.New("the allocation of the name was not made for this reservation")

// allocation returns the reservation's Allocation, creating it for a
// resource-class placement.
func (c *Controller) allocation(ctx context.Context, r *nodusv1.Reservation) (*nodusv1.Allocation, error) {
	name := lifecycle.AllocationName(r)
	if name == "" {
		return nil, nil
	}
	a, err := c.allocations.Get(name)
	if err == nil && r.Spec.Placement.ResourceClass != "" && (a.Labels[LabelReservation] != r.Name || earlierAllocation(a, r)) {
		// Made by someone else (an Ironic client, an operator), or for an
		// earlier reservation of the name (forgetEarlier deletes that):
		// adopted, it would give the tenant another's node, and the
		// reservation's end would delete it.
		return nil, errAllocationNotOwn
	}
	if err == nil || !apierrors.IsNotFound(err) {
		return a, err
	}
	// Only a reservation that may still give access needs one: made while
	// it is releasing or ending (its allocation deleted by an operator), an
	// allocation would take a free node for no one, and outlive the
	// reservation (madeAfterTheEnd keeps a later allocation of the name).
	if r.Spec.Placement.ResourceClass == "" || r.DeletionTimestamp != nil ||
		(r.Status.State != "" && r.Status.State != nodusv1.ReservationStatePending && r.Status.State != nodusv1.ReservationStateActive) {
		return nil, nil
	}
	// An allocation of this name that was just deleted may still hold its
	// node: a new one is made once that claim is gone.
	holders, err := c.nodeIndex.ByIndex(nodeindex.ByAllocation, name)
	if err != nil {
		return nil, err
	}
	if len(holders) > 0 {
		return nil, fmt.Errorf("allocation %s is gone but node %s still records it", name, objectName(holders[0]))
	}
	a = &nodusv1.Allocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelReservation: r.Name, LabelReservationUID: string(r.UID)}},
		Spec: nodusv1.AllocationSpec{ResourceClass: r.Spec.Placement.ResourceClass, Traits: r.Spec.Placement.Traits,
			Owner: r.Spec.Project},
	}
	created, err := c.client.NodusV1().Allocations().Create(ctx, a, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("allocation %s exists but is not in the cache yet", name)
	}
	return created, err
}

// retireOrphan deletes r when its project is gone from etcd (the cache
// may only be behind a project made a moment ago), as the project's
// deletion deletes its reservations: r was admitted a moment before that
// deletion and stored after the project controller listed them, or stored
// before reservations needed a live project. Kept, it would hold its node
// for its term for nobody. It says whether r was deleted.
func (c *Controller) retireOrphan(ctx context.Context, r *nodusv1.Reservation) (bool, error) {
	if r.DeletionTimestamp != nil {
		return false, nil
	}
	_, err := c.client.NodusV1().Projects().Get(ctx, r.Spec.Project, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return false, err
	}
	klog.InfoS("deleting a reservation whose project is gone", "reservation", r.Name, "project", r.Spec.Project)
	err = c.client.NodusV1().Reservations().Delete(ctx, r.Name, *metav1.NewPreconditionDeleteOptions(string(r.UID)))
	if apierrors.IsNotFound(err) || otherUID(err) {
		return true, nil // gone already, or another under the name now: its own sync judges it
	}
	return err == nil, err
}

// retireEarlierProjects deletes r when it was made before its project: it
// was admitted for an earlier project of the name, a moment before that
// one's deletion, and stored after the project controller listed its
// reservations, and the name was taken again since. Kept, it would give
// the new project's members (another customer) the host the operator
// assigned to the earlier one. Only a reservation made in the project's
// second or before is looked up in etcd (creation times are kept to the
// second); one made in a later second is the project's own. It says
// whether r was deleted.
func (c *Controller) retireEarlierProjects(ctx context.Context, r *nodusv1.Reservation, p *nodusv1.Project) (bool, error) {
	if c.PredatesProject == nil || r.DeletionTimestamp != nil || r.CreationTimestamp.After(p.CreationTimestamp.Time) {
		return false, nil
	}
	earlier, err := c.PredatesProject(ctx, r.Name, p.Name)
	if err != nil || !earlier {
		return false, err
	}
	klog.InfoS("deleting a reservation of an earlier project of its project's name", "reservation", r.Name, "project", p.Name)
	err = c.client.NodusV1().Reservations().Delete(ctx, r.Name, *metav1.NewPreconditionDeleteOptions(string(r.UID)))
	if apierrors.IsNotFound(err) || otherUID(err) {
		return true, nil // gone already, or another under the name now: its own sync judges it
	}
	return err == nil, err
}

func (c *Controller) writeHost(ctx context.Context, current, desired *nodusv1.ReservedHost) error {
	if desired == nil {
		return nil
	}
	if p, err := c.projects.Get(desired.Namespace); apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
		return nil // the project does not exist yet (its creation requeues us), or is going
	}
	hosts := c.client.NodusV1().ReservedHosts(desired.Namespace)
	opts := metav1.UpdateOptions{FieldManager: fieldManager}
	if current == nil {
		_, err := hosts.Create(ctx, desired, metav1.CreateOptions{FieldManager: opts.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("reservedhost %s/%s exists but is not in the cache yet", desired.Namespace, desired.Name)
		}
		return err
	}
	// The release request's managedFields entry first (managedFields are
	// taken from a client only on the main resource), then the status: once
	// the status shows the release, both writes are done.
	base := current
	if len(missingReleaseEntries(desired, current)) > 0 {
		// The informer keeps only the release entries of a host's
		// managedFields, and an update that sends managedFields replaces
		// them all: the entries go onto the host as stored, under the
		// resourceVersion the cache saw, so that a write since fails and
		// the sync runs again.
		stored, err := hosts.Get(ctx, current.Name, metav1.GetOptions{ResourceVersion: current.ResourceVersion})
		if err != nil {
			return err
		}
		stored.ResourceVersion = current.ResourceVersion
		stored.ManagedFields = append(stored.ManagedFields, missingReleaseEntries(desired, stored)...)
		if base, err = hosts.Update(ctx, stored, opts); err != nil {
			return err
		}
	}
	if !equality.Semantic.DeepEqual(base.Status, desired.Status) {
		next := base.DeepCopy()
		next.Status = desired.Status
		_, err := hosts.UpdateStatus(ctx, next, opts)
		return err
	}
	return nil
}

// missingReleaseEntries are desired's release-capacity managedFields
// entries that written lacks.
func missingReleaseEntries(desired, written *nodusv1.ReservedHost) []metav1.ManagedFieldsEntry {
	var missing []metav1.ManagedFieldsEntry
	for _, want := range desired.ManagedFields {
		if want.Subresource != reservedhost.ReleaseSubresource {
			continue
		}
		found := false
		for _, have := range written.ManagedFields {
			found = found || (have.Manager == want.Manager && have.Subresource == want.Subresource && have.Time.Equal(want.Time))
		}
		if !found {
			missing = append(missing, want)
		}
	}
	return missing
}

// nodeKeys maps a node to the reservations it concerns: the one holding it
// (also one deleted meanwhile, whose claim must go), and those placed or
// waiting on it, which may claim it once it is free, directly or through
// their allocation.
func (c *Controller) nodeKeys(obj interface{}) []string {
	node, ok := tombstone(obj).(*nodusv1.Node)
	if !ok {
		return nil
	}
	keys := c.reservationsBy(indexNode, node.Name)
	allocations, err := c.allocationIndex.ByIndex(indexAllocationNode, node.Name)
	if err != nil {
		utilruntime.HandleError(err)
	}
	for _, a := range allocations {
		keys = append(keys, c.reservationsBy(indexAllocation, objectName(a))...)
	}
	if node.Status.Reservation != "" {
		keys = append(keys, node.Status.Reservation)
	}
	return keys
}

// noteEpoch keeps the highest epoch seen of the reservation r's name.
func (c *Controller) noteEpoch(r *nodusv1.Reservation) {
	c.finalMu.Lock()
	defer c.finalMu.Unlock()
	if c.finalEpochs == nil {
		c.finalEpochs = map[string]int64{}
	}
	c.finalEpochs[r.Name] = max(c.finalEpochs[r.Name], r.Status.Epoch)
}

// finalEpoch is the highest epoch seen of a reservation of that name.
func (c *Controller) finalEpoch(name string) int64 {
	c.finalMu.Lock()
	defer c.finalMu.Unlock()
	return c.finalEpochs[name]
}

func tombstone(obj interface{}) interface{} {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

func objectName(obj interface{}) string {
	if m, ok := tombstone(obj).(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}
