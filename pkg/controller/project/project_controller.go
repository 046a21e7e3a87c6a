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
	"fmt"
	"slices"
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
	left, err := c.empty(ctx, name)
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

// empty removes one round of the project's contents and says what is left
// ("" when nothing is).
func (c *Controller) empty(ctx context.Context, name string) (string, error) {
	api := c.client.NodusV1()
	// From etcd, not the cache: a reservation created a moment before the
	// deletion began must not be missed, or it outlives the project.
	reservations, err := api.Reservations().List(ctx, metav1.ListOptions{FieldSelector: "spec.project=" + name})
	if err != nil {
		return "", err
	}
	for _, r := range reservations.Items {
		if err := api.Reservations().Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
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
	for _, e := range executions.Items {
		if !e.Status.Phase.Finished() {
			_, err := api.Executions(name).Cancel(ctx, e.Name, &nodusv1.ExecutionCancelRequest{}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return "", err
			}
			continue
		}
		if err := api.Executions(name).Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
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
	for _, h := range hosts.Items {
		if err := api.ReservedHosts(name).Delete(ctx, h.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
	}
	lendings, err := api.HostLendings(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, l := range lendings.Items {
		if err := api.HostLendings(name).Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
	}
	// Borrowing rights are the project's too: a new project of this name
	// is not a borrower until an operator says so.
	pools, err := api.Pools().List(ctx, metav1.ListOptions{})
	if err != nil {
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
	for _, prefix := range c.Prefixes {
		if _, err := c.Etcd.Delete(ctx, prefix+name+"/", clientv3.WithPrefix()); err != nil {
			return "", err
		}
	}
	return "", nil
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
