package reservedhost

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// LendREST serves POST reservedhosts/{name}/lend and …/withdraw: the owner
// lends its host into the host's pool, changes what it lends, or withdraws
// it. Like release, it takes the epoch the owner reviewed and honours
// If-Match and Idempotency-Key. The agreement is kept on the Reservation;
// the answer is the owner's HostLending as it follows from it (the
// scheduler writes the stored one).
type LendREST struct {
	Withdraw     bool
	Hosts        *genericregistry.Store // reservedhosts
	Reservations *genericregistry.Store // reservations/status
	Nodes        *genericregistry.Store
	Pools        *genericregistry.Store
	Lendings     *genericregistry.Store // hostlendings, read for the answer
	Executions   base.Stores            // a withdrawal drains the host's
	Now          func() time.Time
}

var (
	_ rest.NamedCreater    = &LendREST{}
	_ rest.StorageMetadata = &LendREST{}
)

func (r *LendREST) New() runtime.Object {
	if r.Withdraw {
		return &nodusv1.ReservedHostWithdrawRequest{}
	}
	return &nodusv1.ReservedHostLendRequest{}
}
func (r *LendREST) Destroy() {}

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *LendREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject says the answer is the HostLending, for the OpenAPI document.
func (r *LendREST) ProducesObject(string) interface{} { return nodusv1.HostLending{} }

// Create lends or withdraws.
func (r *LendREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	var epoch *int64
	var maxGPUs, maxExecutions *int32
	var memoryMiB, milliCPUs *int64
	switch req := obj.(type) {
	case *nodusv1.ReservedHostLendRequest:
		epoch, maxGPUs, maxExecutions, memoryMiB, milliCPUs = req.Epoch, req.MaxGPUs, req.MaxExecutions, req.MemoryMiB, req.MilliCPUs
	case *nodusv1.ReservedHostWithdrawRequest:
		epoch = req.Epoch
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unexpected body %T", obj))
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	cluster := genericapirequest.WithNamespace(ctx, "")
	gr := nodusv1.Resource("reservedhosts")

	key, own := actions.RequestKey(ctx), actions.Recognizer(ctx)
	current, err := r.Hosts.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	// A retry sends the If-Match it was first sent with, and the host may
	// have moved past it since its effect: only the replay of that effect
	// may pass, below.
	stale := checkIfMatch(ctx, current.(*nodusv1.ReservedHost))
	if stale != nil {
		if took, err := r.tookEffect(cluster, namespace, name, key, own); err != nil {
			return nil, err
		} else if !took {
			return nil, stale
		}
	}
	if epoch == nil {
		return nil, apierror.New(ctx, apierror.ReasonEpochRequired, gr, name,
			`"epoch" is required: send the status.reservation.epoch you reviewed`, "")
	}

	var pool *nodusv1.Pool
	now := metav1.NewTime(r.now().Truncate(time.Second))
	replayed := false
	updated, _, err := r.Reservations.Update(cluster, name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			res := old.(*nodusv1.Reservation).DeepCopy()
			if res.Spec.Project != namespace {
				return nil, apierrors.NewNotFound(gr, name)
			}
			// This very request took effect before a crash cut its answer:
			// applying it again could undo a later lend or withdrawal.
			if replayed = slices.ContainsFunc(res.Status.LendingRequests, own); replayed {
				return res, nil
			}
			if stale != nil {
				return nil, stale
			}
			if err := lifecycle.CheckOwnerChange(ctx, res, *epoch, now.Time); err != nil {
				return nil, err
			}
			if key != "" {
				res.Status.LendingRequests = lifecycle.RememberRequest(res.Status.LendingRequests, key, nodusv1.MaxLendingRequests)
			}
			if r.Withdraw {
				lifecycle.Withdraw(res, *epoch, now.Time)
				return res, nil
			}
			var node *nodusv1.Node
			var err error
			node, pool, err = r.nodeAndPool(ctx, res.Status.Node)
			if apierrors.IsNotFound(err) {
				// Not the host's NotFound, which the answer's would become
				// below: the owner still sees the host.
				return nil, apierror.New(ctx, apierror.ReasonNodeNotFound, gr, name,
					fmt.Sprintf("the node of reservedhost %q was deleted by an operator: nothing can run on it", name),
					fmt.Sprintf("Ask your operator about the host's machine; release the host (`nodus release %s/%s`) if it is gone for good.", namespace, name))
			}
			if err != nil {
				return nil, err
			}
			if pool == nil || pool.Spec.Lending == nil || !pool.Spec.Lending.Open {
				return nil, apierror.New(ctx, apierror.ReasonLendingClosed, gr, name,
					fmt.Sprintf("pool %q of reservedhost %q does not accept lending", node.Spec.Pool, name), "")
			}
			agreement, errs := agreementFor(node, maxGPUs, maxExecutions, memoryMiB, milliCPUs)
			if len(errs) > 0 {
				return nil, apierrors.NewInvalid(nodusv1.Kind("ReservedHostLendRequest"), name, errs)
			}
			lifecycle.Lend(res, agreement, *epoch, now.Time)
			return res, nil
		}), nil, nil, false, &metav1.UpdateOptions{DryRun: options.DryRun})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return nil, err
	}
	res := updated.(*nodusv1.Reservation)
	if replayed {
		actions.MarkReplayed(ctx)
	}
	// Withdrawn, not lent again nor ended: a replay of a withdrawal drains
	// nothing of a later agreement's, nor of the node's next tenant's.
	if r.Withdraw && len(options.DryRun) == 0 && res.Status.Node != "" && lending.State(res) == nodusv1.HostLendingWithdrawn {
		if err := r.drain(cluster, res, now); err != nil {
			// Withdrawn; a retry with the same Idempotency-Key drains again.
			return nil, err
		}
	}
	if pool == nil && res.Status.Node != "" {
		_, pool, _ = r.nodeAndPool(ctx, res.Status.Node)
	}
	return r.answer(ctx, namespace, name, res, pool)
}

// drain ends the borrowers' executions placed on node, as the host's agent
// does when it sees the withdrawal. The agent may not see it: a lend that
// follows at once, while its watch is broken, shows it the host lent
// throughout. A scheduled execution, which nothing runs yet, is drained
// here (a start the agent reports after it is refused); a running one is
// asked to drain (status.drainRequestedAt): the agent stops it and reports
// it drained, and until then it holds its GPUs, its output still to come.
// A node another reservation holds now is left alone: what runs there was
// placed under that one's agreement.
func (r *LendREST) drain(ctx context.Context, res *nodusv1.Reservation, now metav1.Time) error {
	obj, err := r.Nodes.Get(ctx, res.Status.Node, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	node := obj.(*nodusv1.Node)
	if node.Status.Reservation != "" && !lifecycle.Holds(res, node) {
		return nil
	}
	alias := lending.HostAlias(node)
	// From etcd: an execution the watch cache does not show yet is one
	// the scheduler may have just placed.
	list, err := r.Executions.Main.List(ctx, &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.host", alias)})
	if err != nil {
		return err
	}
	for _, e := range list.(*nodusv1.ExecutionList).Items {
		if e.Status.Phase != nodusv1.ExecutionScheduled && (e.Status.Phase != nodusv1.ExecutionRunning || e.Status.DrainRequestedAt != nil) {
			continue
		}
		placed := e.UID
		_, _, err := r.Executions.Status.Update(genericapirequest.WithNamespace(ctx, e.Namespace), e.Name, rest.DefaultUpdatedObjectInfo(nil,
			func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
				d := old.(*nodusv1.Execution).DeepCopy()
				switch {
				case d.UID != placed || d.Status.Host != alias:
					// Another since.
				case d.Status.Phase == nodusv1.ExecutionScheduled:
					d.Status.Phase, d.Status.FinishedAt = nodusv1.ExecutionDrained, &now
					d.Status.Reason, d.Status.Message = "Drained", "the owner withdrew the host before the execution started"
				case d.Status.Phase == nodusv1.ExecutionRunning && d.Status.DrainRequestedAt == nil:
					d.Status.DrainRequestedAt = &now
					d.Status.Message = lending.DrainAsked("the owner withdrew the host")
				}
				return d, nil
			}), nil, nil, false, &metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// tookEffect says whether the request of key (own recognises its
// references) lent or withdrew reservation name of namespace already.
func (r *LendREST) tookEffect(ctx context.Context, namespace, name, key string, own func(string) bool) (bool, error) {
	if key == "" {
		return false, nil
	}
	res, err := projectReservation(ctx, r.Reservations, namespace, name)
	return res != nil && slices.ContainsFunc(res.Status.LendingRequests, own), err
}

// agreementFor checks the caps asked against the node and fills in defaults:
// every GPU of the host, and one execution per lent GPU (at least one), never
// more than the host's agent has execution slots for; memory and CPUs in
// proportion to the GPUs lent, never more than the host has.
func agreementFor(node *nodusv1.Node, maxGPUs, maxExecutions *int32, memoryMiB, milliCPUs *int64) (*nodusv1.ReservationLending, field.ErrorList) {
	gpus := lending.GPUCount(node)
	a := &nodusv1.ReservationLending{Lent: true, MaxGPUs: gpus}
	var errs field.ErrorList
	if maxGPUs != nil {
		switch {
		case *maxGPUs < 0:
			errs = append(errs, field.Invalid(field.NewPath("maxGPUs"), *maxGPUs, "must not be negative"))
		case *maxGPUs > gpus:
			errs = append(errs, field.Invalid(field.NewPath("maxGPUs"), *maxGPUs, fmt.Sprintf("the host has %d GPUs", gpus)))
		default:
			a.MaxGPUs = *maxGPUs
		}
	}
	limit := int32(lending.MaxExecutionsPerHost)
	if slots := node.Status.ExecutionSlots; slots > 0 {
		limit = min(limit, slots)
	}
	a.MaxExecutions = min(max(a.MaxGPUs, 1), limit)
	if maxExecutions != nil {
		if *maxExecutions < 1 || *maxExecutions > limit {
			errs = append(errs, field.Invalid(field.NewPath("maxExecutions"), *maxExecutions,
				fmt.Sprintf("must be between 1 and %d (the host runs at most %d at once)", limit, limit)))
		} else {
			a.MaxExecutions = *maxExecutions
		}
	}
	hostMemory, hostMilliCPUs := node.Status.Inventory.MemoryMiB, int64(node.Status.Inventory.CPU)*1000
	a.MemoryMiB, a.MilliCPUs = lending.DefaultShare(hostMemory, a.MaxGPUs, gpus), lending.DefaultShare(hostMilliCPUs, a.MaxGPUs, gpus)
	for _, asked := range []struct {
		name        string
		value       *int64
		host, floor int64
		into        *int64
		unit        string
	}{{"memoryMiB", memoryMiB, hostMemory, lending.MinExecutionMemoryMiB, &a.MemoryMiB, "MiB of memory"},
		{"milliCPUs", milliCPUs, hostMilliCPUs, lending.MinExecutionMilliCPUs, &a.MilliCPUs, "thousandths of a CPU"}} {
		if asked.value == nil {
			// 0, a sandbox's "no limit", is what a host that has not
			// reported its inventory would lend by default.
			if *asked.into < asked.floor {
				errs = append(errs, field.Invalid(field.NewPath(asked.name), *asked.into,
					fmt.Sprintf("the host's share is less than one execution needs (%d %s): its agent has not reported the host's inventory, or the host has too little", asked.floor, asked.unit)))
			}
			continue
		}
		if *asked.value < asked.floor || *asked.value > asked.host {
			errs = append(errs, field.Invalid(field.NewPath(asked.name), *asked.value,
				fmt.Sprintf("must be between %d and the host's %d %s", asked.floor, asked.host, asked.unit)))
			continue
		}
		*asked.into = *asked.value
	}
	return a, errs
}

func (r *LendREST) nodeAndPool(ctx context.Context, nodeName string) (*nodusv1.Node, *nodusv1.Pool, error) {
	cluster := genericapirequest.WithNamespace(ctx, "")
	obj, err := r.Nodes.Get(cluster, nodeName, &metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	node := obj.(*nodusv1.Node)
	obj, err = r.Pools.Get(cluster, node.Spec.Pool, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return node, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return node, obj.(*nodusv1.Pool), nil
}

// answer is the owner's HostLending as the agreement makes it, keeping the
// use the scheduler last recorded. It is not written here: the scheduler is
// the one writer of HostLendings and brings the stored one in line at once.
func (r *LendREST) answer(ctx context.Context, namespace, name string, res *nodusv1.Reservation, pool *nodusv1.Pool) (runtime.Object, error) {
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	l := &nodusv1.HostLending{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	obj, err := r.Lendings.Get(ctx, name, &metav1.GetOptions{})
	switch {
	case err == nil:
		l = obj.(*nodusv1.HostLending).DeepCopy()
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	usage := lending.Usage{}
	for _, b := range l.Status.Borrowers {
		usage[b.Project] = b
	}
	st := lending.Status(res, pool, usage, l.Status.GPUIndices)
	st.BorrowedGPUs, st.Executions = l.Status.BorrowedGPUs, l.Status.Executions
	l.Status = st
	return l, nil
}

func (r *LendREST) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
