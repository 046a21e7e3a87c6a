package execution

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/registry/agentview"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var gr = nodusv1.Resource("executions")

// Storage returns the Execution storages: the resource, its status, the
// borrower's cancel action, the agent's report action and the log.
func Storage(executions, reservations, nodes base.Stores, logs *executionlog.Store) map[string]rest.Storage {
	storage := executions.Storage("executions", "exec")
	storage["executions"] = &REST{REST: &agentview.REST{REST: storage["executions"].(*base.REST), Shown: unfinished}, Logs: logs}
	storage["executions/cancel"] = &CancelREST{Executions: executions.Status}
	storage["executions/report"] = &ReportREST{Executions: executions.Status, Reservations: reservations.Main, Nodes: nodes.Main, Logs: logs}
	storage["executions/log"] = &LogREST{Executions: executions.Main, Logs: logs}
	return storage
}

// REST keeps an execution while it holds a host: deleting it then would
// free its GPUs for others while its processes may still run. A deleted
// execution's kept output goes with it. A node agent lists and watches
// only the executions that have not finished (unfinished).
type REST struct {
	*agentview.REST
	Logs *executionlog.Store
}

// Delete refuses executions that are scheduled or running.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	var deleting *nodusv1.Execution
	deleted, immediately, err := r.REST.Delete(ctx, name, recording(notPlaced(deleteValidation), func(e *nodusv1.Execution) { deleting = e }), options)
	if err == nil && immediately && deleting != nil {
		r.deleteLog(ctx, options, deleting)
	}
	return deleted, immediately, err
}

// DeleteCollection refuses, one by one, executions that are scheduled or
// running. Of those it let through, the outputs of the ones gone go too.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	var mu sync.Mutex
	let := map[types.UID]*nodusv1.Execution{}
	deleted, err := r.REST.DeleteCollection(ctx, recording(notPlaced(deleteValidation), func(e *nodusv1.Execution) {
		mu.Lock()
		defer mu.Unlock()
		let[e.UID] = e
	}), options, listOptions)
	for _, e := range let {
		current, getErr := r.REST.Get(genericapirequest.WithNamespace(ctx, e.Namespace), e.Name, &metav1.GetOptions{})
		if apierrors.IsNotFound(getErr) || (getErr == nil && current.(*nodusv1.Execution).UID != e.UID) {
			r.deleteLog(ctx, options, e)
		}
	}
	return deleted, err
}

// recording calls seen with each execution next lets be deleted.
func recording(next rest.ValidateObjectFunc, seen func(*nodusv1.Execution)) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if err := next(ctx, obj); err != nil {
			return err
		}
		seen(obj.(*nodusv1.Execution))
		return nil
	}
}

// deleteLog removes a deleted execution's output. A failure leaves it on
// its lease, counted against the project's bound (executionlimit) until
// the lease ends; the delete itself is done and answered as such.
func (r *REST) deleteLog(ctx context.Context, options *metav1.DeleteOptions, e *nodusv1.Execution) {
	if options != nil && len(options.DryRun) > 0 {
		return
	}
	if err := r.Logs.Delete(ctx, e.Namespace, e.Name, e.UID); err != nil {
		klog.ErrorS(err, "deleting a deleted execution's output", "namespace", e.Namespace, "execution", e.Name, "uid", e.UID)
	}
}

// notPlaced runs against the stored object inside the delete, so a
// placement that lands meanwhile is seen.
func notPlaced(next rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		e := obj.(*nodusv1.Execution)
		if e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning {
			return apierror.New(ctx, apierror.ReasonExecutionActive, gr, e.Name,
				fmt.Sprintf("execution %q is %s on a host: cancel it, and delete it once it ended", e.Name, e.Status.Phase), "")
		}
		if next != nil {
			return next(ctx, obj)
		}
		return nil
	}
}

// CancelREST serves POST executions/{name}/cancel. A pending or scheduled
// execution ends as cancelled at once; a running one gets
// status.cancelRequestedAt, and its agent stops it and reports it cancelled.
type CancelREST struct {
	Executions *genericregistry.Store // executions/status
}

func (r *CancelREST) New() runtime.Object { return &nodusv1.ExecutionCancelRequest{} }
func (r *CancelREST) Destroy()            {}

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *CancelREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject says the answer is the Execution.
func (r *CancelREST) ProducesObject(string) interface{} { return nodusv1.Execution{} }

// Create cancels.
func (r *CancelREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*nodusv1.ExecutionCancelRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an ExecutionCancelRequest, got %T", obj))
	}
	who := "a borrower"
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		who = u.GetName()
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	updated, _, err := r.Executions.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			e := old.(*nodusv1.Execution).DeepCopy()
			if req.UID != "" && e.UID != req.UID {
				// Another execution made since under the name: the one asked
				// for does not exist.
				return nil, apierrors.NewNotFound(gr, name)
			}
			switch e.Status.Phase {
			case nodusv1.ExecutionCancelled:
				return e, nil
			case nodusv1.ExecutionPending, nodusv1.ExecutionScheduled, "":
				e.Status.Phase, e.Status.FinishedAt = nodusv1.ExecutionCancelled, &now
				e.Status.Reason, e.Status.Message = "Cancelled", "cancelled by "+who+" before it started"
				e.Status.Host, e.Status.GPUIndices = "", nil
			case nodusv1.ExecutionRunning:
				if e.Status.CancelRequestedAt == nil {
					e.Status.CancelRequestedAt = &now
					e.Status.Message = "cancel requested by " + who + "; the host stops it"
				}
			default:
				return nil, apierror.New(ctx, apierror.ReasonExecutionFinished, gr, name,
					fmt.Sprintf("execution %q already ended: %s", name, e.Status.Phase), "")
			}
			return e, nil
		}), nil, nil, false, &metav1.UpdateOptions{DryRun: options.DryRun})
	return updated, err
}

// ReportREST serves POST executions/{name}/report for the agent of the host
// the execution is placed on: it moves the execution to running or to its
// end and keeps the tail of its output.
type ReportREST struct {
	Executions   *genericregistry.Store // executions/status
	Reservations *genericregistry.Store
	Nodes        *genericregistry.Store
	Logs         *executionlog.Store
}

func (r *ReportREST) New() runtime.Object { return &nodusv1.ExecutionReport{} }
func (r *ReportREST) Destroy()            {}

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *ReportREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject says the answer is the Execution.
func (r *ReportREST) ProducesObject(string) interface{} { return nodusv1.Execution{} }

// Create applies the report.
func (r *ReportREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	report, ok := obj.(*nodusv1.ExecutionReport)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected an ExecutionReport, got %T", obj))
	}
	if report.Phase != nodusv1.ExecutionRunning && !report.Phase.Finished() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("phase %q cannot be reported: send running, succeeded, failed, drained or cancelled", report.Phase))
	}
	if errs := validation.ValidateExecutionReport(report); len(errs) > 0 {
		return nil, apierrors.NewInvalid(nodusv1.Kind("ExecutionReport"), name, errs)
	}
	u, _ := genericapirequest.UserFrom(ctx)
	nodeName, _, isAgent := auth.NodeOf(u)
	if !isAgent {
		return nil, apierrors.NewForbidden(gr, name, fmt.Errorf("only the agent of the host an execution runs on reports it"))
	}
	cluster := genericapirequest.WithNamespace(ctx, "")
	// From the watch cache for a report that changes no phase (output);
	// from etcd for a start or an end, and whenever the cached node is not the
	// credential's: the authorizer checked the credential against the
	// cache, which may not show a re-enrollment or the node's deletion
	// yet, and the alias comes from the node object's UID.
	current, err := r.Executions.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	placed := current.(*nodusv1.Execution)
	if report.UID != "" && report.UID != placed.UID {
		// A late report of an execution deleted since, whose name another
		// now has: to this agent, the one it reports does not exist.
		return nil, apierrors.NewNotFound(gr, name)
	}
	node, err := r.node(cluster, nodeName, placed.Status.Phase != report.Phase)
	if err == nil && auth.AgentRetired(u, node) != "" {
		node, err = r.node(cluster, nodeName, true)
	}
	if err != nil {
		return nil, err
	}
	if why := auth.AgentRetired(u, node); why != "" {
		return nil, apierror.New(ctx, apierror.ReasonStaleAgent, gr, name, why, "")
	}
	alias := lending.HostAlias(node)
	if placed.Status.Host != alias {
		// Not placed here: to this agent, it does not exist.
		return nil, apierrors.NewNotFound(gr, name)
	}
	if report.Phase == nodusv1.ExecutionRunning {
		// The start reads etcd, so that a withdrawal answered a moment ago
		// always stops it; the running reports after it read the cache.
		starting := placed.Status.Phase == nodusv1.ExecutionScheduled
		lent, err := r.lent(cluster, node, starting)
		if err != nil {
			return nil, err
		}
		if !lent {
			return nil, apierror.New(ctx, apierror.ReasonHostNotLent, gr, name,
				fmt.Sprintf("the host of execution %q is no longer lent: do not start it", name), "")
		}
	}

	// A report the update below would refuse is refused before its output
	// is kept: an end's output is final, and a refused one (a success of
	// an execution never started, an end after another) would stand for
	// the borrower in place of the real end's. The update refuses it
	// again, on the version it writes.
	if err := refusedReport(ctx, name, placed, report); err != nil {
		return nil, err
	}
	// The output is kept before the phase changes: whoever sees the end
	// also finds the last output. An ended execution's output is final: its
	// end report wrote it, and a repeated one (a lost answer's retry) writes
	// nothing, so no agent rewrites what the borrower has read.
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	wroteOutput := false
	if len(options.DryRun) == 0 && !placed.Status.Phase.Finished() && (report.Log != "" || report.LogDroppedBytes > 0) {
		if err := r.Logs.Put(ctx, ns, name, placed.UID, executionlog.Log{Data: []byte(report.Log), DroppedBytes: report.LogDroppedBytes,
			Final: report.Phase.Finished()}); err != nil {
			return nil, err
		}
		wroteOutput = true
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	updated, _, err := r.Executions.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			e := old.(*nodusv1.Execution).DeepCopy()
			if e.Status.Host != alias || e.UID != placed.UID {
				// Not placed here: to this agent, it does not exist.
				return nil, apierrors.NewNotFound(gr, name)
			}
			if e.Status.Phase == report.Phase {
				return e, nil // a repeated report, or fresh output only
			}
			if err := refusedReport(ctx, name, e, report); err != nil {
				return nil, err
			}
			e.Status.Phase = report.Phase
			e.Status.Reason, e.Status.Message = report.Reason, report.Message
			if report.Phase == nodusv1.ExecutionRunning {
				e.Status.StartedAt = &now
			} else {
				e.Status.FinishedAt = &now
				e.Status.ExitCode = report.ExitCode
			}
			return e, nil
		}), nil, nil, false, &metav1.UpdateOptions{DryRun: options.DryRun})
	if apierrors.IsNotFound(err) && wroteOutput {
		r.forgetOrphanedOutput(ctx, ns, name, placed.UID)
	}
	if err != nil {
		return nil, err
	}
	return withoutRecord(updated.(*nodusv1.Execution)), nil
}

// refusedReport says why report cannot change e, nil where it can (or
// changes no phase).
func refusedReport(ctx context.Context, name string, e *nodusv1.Execution, report *nodusv1.ExecutionReport) error {
	from, to := e.Status.Phase, report.Phase
	switch {
	case from == to:
		return nil
	case from.Finished():
		return apierror.New(ctx, apierror.ReasonExecutionFinished, gr, name, fmt.Sprintf("execution %q is %s: it cannot become %s", name, from, to), "")
	case from == nodusv1.ExecutionPending || (to == nodusv1.ExecutionRunning && from != nodusv1.ExecutionScheduled):
		return apierrors.NewConflict(gr, name, fmt.Errorf("execution %q is %s: it cannot become %s", name, from, to))
	// What the borrower reads of its end is the agent's word only where
	// the agent could know it: a success needs a start, a cancel the
	// borrower's asking.
	case to == nodusv1.ExecutionSucceeded && from != nodusv1.ExecutionRunning:
		return apierrors.NewConflict(gr, name, fmt.Errorf("execution %q never started: it cannot have succeeded", name))
	case to == nodusv1.ExecutionCancelled && e.Status.CancelRequestedAt == nil:
		return apierrors.NewConflict(gr, name, fmt.Errorf("execution %q was not cancelled by its borrower: report how it ended", name))
	}
	return nil
}

// forgetOrphanedOutput removes the output just stored for an execution
// that was deleted between the report's read of it and that write: the
// delete removed the output it found, none yet, and this one would be kept
// for two weeks, counted against its project's bound (executionlimit). An
// execution still there (the update found it not placed here) keeps its
// output; its own delete removes it.
func (r *ReportREST) forgetOrphanedOutput(ctx context.Context, namespace, name string, uid types.UID) {
	current, err := r.Executions.Get(ctx, name, &metav1.GetOptions{})
	if err == nil && current.(*nodusv1.Execution).UID == uid {
		return
	}
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "reading an execution whose report failed", "namespace", namespace, "execution", name)
		return
	}
	if err := r.Logs.Delete(ctx, namespace, name, uid); err != nil {
		klog.ErrorS(err, "deleting a deleted execution's output", "namespace", namespace, "execution", name, "uid", uid)
	}
}

// withoutRecord is a finished execution as its agent's report is answered:
// without its spec. The command and environment are the borrower's record
// once the run is over, which the host's credential (copied, maybe, by a
// tenant with root there) no longer reads: nor in a list (unfinished), nor
// in the answer to a repeated end report.
func withoutRecord(e *nodusv1.Execution) *nodusv1.Execution {
	if !e.Status.Phase.Finished() {
		return e
	}
	answer := e.DeepCopy()
	answer.Spec = nodusv1.ExecutionSpec{}
	return answer
}

// node reads the Node an agent reports for, from etcd when fresh.
func (r *ReportREST) node(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error) {
	opts := &metav1.GetOptions{ResourceVersion: "0"}
	if fresh {
		opts = &metav1.GetOptions{}
	}
	obj, err := r.Nodes.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Node), nil
}

// lent says whether the reservation holding node lends it now, from etcd
// when fresh, else from the watch cache (a withdrawal it does not show yet
// is still drained by the agent). Another reservation naming the node, one
// whose claim left it (a former owner's, before a controller ends it),
// lends nothing there.
func (r *ReportREST) lent(ctx context.Context, node *nodusv1.Node, fresh bool) (bool, error) {
	opts := &metainternalversion.ListOptions{ResourceVersion: "0", FieldSelector: fields.OneTermEqualSelector("status.node", node.Name)}
	if fresh {
		opts.ResourceVersion = ""
	}
	list, err := r.Reservations.List(ctx, opts)
	if err != nil {
		return false, err
	}
	for i := range list.(*nodusv1.ReservationList).Items {
		if res := &list.(*nodusv1.ReservationList).Items[i]; lending.LentAt(res, time.Now()) && lifecycle.Holds(res, node) {
			return true, nil
		}
	}
	return false, nil
}

// LogREST serves GET executions/{name}/log: the kept tail of the output, as text.
type LogREST struct {
	Executions *genericregistry.Store
	Logs       *executionlog.Store
}

var (
	_ rest.Getter          = &LogREST{}
	_ rest.StorageMetadata = &LogREST{}
)

func (r *LogREST) New() runtime.Object { return &nodusv1.Execution{} }
func (r *LogREST) Destroy()            {}

// ProducesMIMETypes says the log is plain text.
func (r *LogREST) ProducesMIMETypes(string) []string { return []string{"text/plain"} }

// ProducesObject says the answer is a string.
func (r *LogREST) ProducesObject(string) interface{} { return "" }

// Get returns the log as a stream.
func (r *LogREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.Executions.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	e := obj.(*nodusv1.Execution)
	log, err := r.Logs.Get(ctx, e.Namespace, e.Name, e.UID)
	if err != nil {
		return nil, err
	}
	return &logStream{data: nodusv1.ExecutionLogBody(log.DroppedBytes, log.Data)}, nil
}

// logStream is the log as the generic server streams it.
type logStream struct {
	metav1.TypeMeta
	data []byte
}

var _ rest.ResourceStreamer = &logStream{}

func (s *logStream) DeepCopyObject() runtime.Object {
	return &logStream{TypeMeta: s.TypeMeta, data: bytes.Clone(s.data)}
}

// InputStream implements rest.ResourceStreamer.
func (s *logStream) InputStream(context.Context, string, string) (io.ReadCloser, bool, string, error) {
	return io.NopCloser(bytes.NewReader(s.data)), false, "text/plain; charset=utf-8", nil
}
