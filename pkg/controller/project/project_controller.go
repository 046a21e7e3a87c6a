// Package project finalizes deleted Projects as Kubernetes' namespace
// controller does namespaces: everything of the project goes — its
// Reservations (live ones retired as a deleted reservation is, so their
// nodes are cleaned), its ReservedHosts, Executions (cancelled first when
// they run), HostLendings, execution logs, idempotency records and its
// entries as a borrower in pools — and only then the Project itself, so
// that a project created later under the same name inherits nothing.
package project

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/worker"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	listers "github.com/nodus-dev/nodus/pkg/generated/listers/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/projectsweep"
	"github.com/nodus-dev/nodus/pkg/registry/project"
)

// Controller finalizes deleted projects.
type Controller struct {
	client   versioned.Interface
	projects listers.ProjectLister
	// Prefixes are the etcd key prefixes of a project's data kept outside
	// its objects (execution logs, idempotency records); the project's name
	// and "/" follow each.
	Prefixes []string
	// Layout says where projects and what their namespaces hold are in
	// etcd, for the sweep of what an earlier project of a name left.
	Layout projectsweep.Layout
	Etcd   *clientv3.Client
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	sweptMu sync.Mutex
	swept   map[types.UID]bool // projects whose namespace holds nothing of an earlier one

	// paused, when set, is called as each of empty's steps is about to
	// write, with the step's name: tests pause there, as a leader paused
	// mid-round (and no longer leading) would.
	paused func(step string)
}

// New wires the controller to factory's informers.
func New(client versioned.Interface, factory externalversions.SharedInformerFactory, etcd *clientv3.Client, prefixes []string, layout projectsweep.Layout) (*Controller, error) {
	v1 := factory.Nodus().V1()
	c := &Controller{
		client: client, projects: v1.Projects().Lister(), Etcd: etcd, Prefixes: prefixes, Layout: layout, swept: map[types.UID]bool{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "projects"}),
	}
	enqueue := func(obj interface{}) {
		if p, ok := obj.(*nodusv1.Project); ok {
			c.queue.Add(p.Name)
		}
	}
	informer := v1.Projects().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{informer.HasSynced}
	return c, nil
}

// Run processes projects until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		c.queue.ShutDown()
		return
	}
	klog.InfoS("project controller started")
	worker.Run(ctx, c.queue, workers, "projects", c.sync)
}

const fieldManager = "nodus-project-controller"

func (c *Controller) sync(ctx context.Context, name string) error {
	cached, err := c.projects.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	p := cached
	if p.DeletionTimestamp == nil {
		if slices.Contains(p.Finalizers, project.Finalizer) {
			return c.sweepEarlier(ctx, p)
		}
		// Made before projects were finalized: finalize it from now on.
		next := p.DeepCopy()
		next.Finalizers = append(next.Finalizers, project.Finalizer)
		_, err := c.client.NodusV1().Projects().Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	}
	if !slices.Contains(p.Finalizers, project.Finalizer) {
		return nil
	}
	// The cache may show a project that another leader finalized since (this
	// replica paused), and whose name a new project has now: emptying it
	// would delete the new project's contents. What is emptied is the
	// project etcd has, being deleted, with the cache's UID.
	if p, err = c.client.NodusV1().Projects().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if p.UID != cached.UID || p.DeletionTimestamp == nil || !slices.Contains(p.Finalizers, project.Finalizer) {
		return nil
	}
	left, err := c.empty(ctx, p)
	if errors.Is(err, errReplaced) {
		return nil
	}
	if err != nil {
		return err
	}
	if left != "" {
		klog.V(2).InfoS("project still being emptied", "project", name, "left", left)
		c.queue.AddAfter(name, time.Second)
		return nil
	}
	next := p.DeepCopy()
	next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == project.Finalizer })
	_, err = c.client.NodusV1().Projects().Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager})
	if err == nil {
		klog.InfoS("project finalized", "project", name)
	}
	return err
}

// empty removes one round of the project p's contents and says what is
// left ("" when nothing is). A leader may pause in the middle of a round,
// lose its lead meanwhile, and resume after another finalized p and a new
// project of its name was made: what it lists then is the new project's.
// So each step checks, after its list, that p is still there (errReplaced
// when it is not), and deletes only the objects listed (their UIDs); the
// data outside objects goes only while p's key is as read.
func (c *Controller) empty(ctx context.Context, p *nodusv1.Project) (string, error) {
	name := p.Name
	api := c.client.NodusV1()
	// From etcd, not the cache: a reservation created a moment before the
	// deletion began must not be missed, or it outlives the project.
	reservations, err := api.Reservations().List(ctx, metav1.ListOptions{FieldSelector: "spec.project=" + name})
	if err != nil {
		return "", err
	}
	if err := c.stillThere(ctx, p, "reservations"); err != nil {
		return "", err
	}
	for _, r := range reservations.Items {
		if err := api.Reservations().Delete(ctx, r.Name, listedOnly(r.UID)); err != nil && !goneOrReplaced(err) {
			return "", err
		}
	}
	if left := len(reservations.Items); left > 0 {
		// Their ReservedHosts and HostLendings are removed by their own
		// controllers; what is left after is removed below.
		return fmt.Sprintf("%d reservations", left), nil
	}
	executions, err := api.Executions(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	if err := c.stillThere(ctx, p, "executions"); err != nil {
		return "", err
	}
	for _, e := range executions.Items {
		if !e.Status.Phase.Finished() {
			// The execution listed only, as the deletes below.
			_, err := api.Executions(name).Cancel(ctx, e.Name, &nodusv1.ExecutionCancelRequest{UID: e.UID}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return "", err
			}
			continue
		}
		// Conflict: running again (cancelled next round), or replaced.
		if err := api.Executions(name).Delete(ctx, e.Name, listedOnly(e.UID)); err != nil && !goneOrReplaced(err) {
			return "", err
		}
	}
	if n := len(executions.Items); n > 0 {
		return fmt.Sprintf("%d executions", n), nil
	}
	hosts, err := api.ReservedHosts(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	if err := c.stillThere(ctx, p, "reservedhosts"); err != nil {
		return "", err
	}
	for _, h := range hosts.Items {
		if err := api.ReservedHosts(name).Delete(ctx, h.Name, listedOnly(h.UID)); err != nil && !goneOrReplaced(err) {
			return "", err
		}
	}
	lendings, err := api.HostLendings(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	if err := c.stillThere(ctx, p, "hostlendings"); err != nil {
		return "", err
	}
	for _, l := range lendings.Items {
		if err := api.HostLendings(name).Delete(ctx, l.Name, listedOnly(l.UID)); err != nil && !goneOrReplaced(err) {
			return "", err
		}
	}
	// Borrowing rights are the project's too: a new project of this name
	// is not a borrower until an operator says so. Each update holds only
	// while the pool is as listed.
	pools, err := api.Pools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	if err := c.stillThere(ctx, p, "pools"); err != nil {
		return "", err
	}
	for _, pool := range pools.Items {
		l := pool.Spec.Lending
		if l == nil || !slices.ContainsFunc(l.Borrowers, func(b nodusv1.PoolBorrower) bool { return b.Project == name }) {
			continue
		}
		next := pool.DeepCopy()
		next.Spec.Lending.Borrowers = slices.DeleteFunc(next.Spec.Lending.Borrowers, func(b nodusv1.PoolBorrower) bool { return b.Project == name })
		if _, err := api.Pools().Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return "", err
		}
	}
	if err := c.stillThere(ctx, p, "data"); err != nil {
		return "", err
	}
	return c.deleteData(ctx, p)
}

// errReplaced: the project being emptied is gone, finalized by another
// leader; a project of its name now is another one, not to be emptied.
var errReplaced = errors.New("the project was finalized, and its name may be another project's now")

// stillThere checks, after a step's list, that p is still stored: then
// what the step listed is p's, and deleted by UID, it stays so however
// late the deletes land.
func (c *Controller) stillThere(ctx context.Context, p *nodusv1.Project, step string) error {
	now, err := c.client.NodusV1().Projects().Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && now.UID != p.UID) {
		return errReplaced
	}
	if err != nil {
		return err
	}
	if c.paused != nil {
		c.paused(step)
	}
	return nil
}

// deleteData removes p's data kept outside objects (execution logs,
// idempotency records), in one transaction that holds only while p's key
// is as read: a new project of the name keeps its own.
func (c *Controller) deleteData(ctx context.Context, p *nodusv1.Project) (string, error) {
	if len(c.Prefixes) == 0 {
		return "", nil
	}
	var deletes []clientv3.Op
	for _, prefix := range c.Prefixes {
		deletes = append(deletes, clientv3.OpDelete(prefix+p.Name+"/", clientv3.WithPrefix()))
	}
	txn := c.Etcd.Txn(ctx)
	if c.Layout.Projects != "" {
		rv, err := strconv.ParseInt(p.ResourceVersion, 10, 64)
		if err != nil {
			return "", fmt.Errorf("project %s has resourceVersion %q: %w", p.Name, p.ResourceVersion, err)
		}
		txn = txn.If(clientv3.Compare(clientv3.ModRevision(c.Layout.Projects+p.Name), "=", rv))
	}
	resp, err := txn.Then(deletes...).Commit()
	if err != nil {
		return "", err
	}
	if !resp.Succeeded {
		return "the project's data (it changed since it was read)", nil
	}
	return "", nil
}

// listedOnly deletes the object of a name only while it is the one listed.
func listedOnly(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}

// goneOrReplaced: deleted since it was listed, or its name is another
// object's now (a conflict: the next round lists it, if it is this
// project's).
func goneOrReplaced(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// sweepEarlier deletes, once per project, what an earlier project of its
// name left in its namespace (package projectsweep). The project's creation
// sweeps too, before it answers; this is for a project made while that
// failed, or by a server before the sweep.
func (c *Controller) sweepEarlier(ctx context.Context, p *nodusv1.Project) error {
	if c.Etcd == nil || c.Layout.Projects == "" {
		return nil
	}
	c.sweptMu.Lock()
	done := c.swept[p.UID]
	c.sweptMu.Unlock()
	if done {
		return nil
	}
	made, err := projectsweep.MadeAt(ctx, c.Etcd, c.Layout, p.Name)
	if err != nil || made == 0 {
		return err // none: gone meanwhile, and its deletion empties it
	}
	if err := projectsweep.Sweep(ctx, c.Etcd, c.Layout, p.Name, made); err != nil {
		return err
	}
	c.sweptMu.Lock()
	c.swept[p.UID] = true
	c.sweptMu.Unlock()
	return nil
}
