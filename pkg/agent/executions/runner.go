// Package executions runs borrowers' executions on a lent host: each as the
// dedicated borrower account in a sandbox of its own (package sandbox: an
// OCI runtime with its own namespaces, limits and only its GPUs), in a work
// directory of its own that is removed afterwards, stopped at its maximum
// runtime, and drained (TERM, grace, KILL) when the host stops being lent.
package executions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/sandbox"
	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/lending"
	apioutcome "github.com/nodus-dev/nodus/pkg/outcome"
)

// The reasons an agent reports.
const (
	ReasonDrained            = "Drained"
	ReasonCancelled          = "Cancelled"
	ReasonMaxRuntimeExceeded = "MaxRuntimeExceeded"
	ReasonExited             = "Exited"
	ReasonStartFailed        = "StartFailed"
	ReasonAgentRestarted     = "AgentRestarted"
	ReasonOutOfMemory        = "OutOfMemory"
	ReasonImageNotFound      = "ImageNotFound"
	// ReasonInvalidPlacement: what the server says of the execution is
	// not something this agent runs (a UID that is not a UUID, no
	// command, GPUs other than asked for).
	ReasonInvalidPlacement = "InvalidPlacement"
)

// DefaultPidsLimit bounds the processes of one sandboxed execution.
const DefaultPidsLimit = 4096

// outputDrain is how long an execution's output is still read after its
// process exited; what it left behind may keep the output open for ever.
const outputDrain = 2 * time.Second

// childPath is the PATH executions get, whatever the agent's own is.
const childPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options configure a Runner.
type Options struct {
	Client versioned.Interface
	// Alias is the host's alias; the runner watches executions placed on it.
	Alias string
	// User is the borrower account executions run as; with Slots, the
	// accounts USER-0 … USER-(Slots-1), one execution each at a time.
	User string
	// Slots, when above zero, gives every execution an account of its own.
	Slots int
	// WorkRoot holds the executions' work directories.
	WorkRoot string
	// Grace is the time between SIGTERM and SIGKILL.
	Grace time.Duration
	// LogEvery is how often fresh output is uploaded while an execution runs.
	LogEvery time.Duration
	// Lending is the owner's lending agreement while the host is lent, nil
	// while it is not. Without it (a runner tried alone) the host counts
	// as lent with no caps.
	Lending func() *nodusv1.ReservationLending
	// OwnerUsers are the login users of the reservations on the host:
	// executions never run as one of them.
	OwnerUsers func() []string
	// Sandbox runs each execution isolated; nil runs it as a plain process
	// group of the borrower account (no isolation: development only).
	Sandbox *sandbox.Runtime
	// SandboxError, when Sandbox is nil, is why there is none: every
	// execution then fails to start with it.
	SandboxError error
	// GPUDriverDir is the NVIDIA driver's list of GPUs, which names them
	// to CUDA by UUID; "" is nvidiagpus.DriverDir.
	GPUDriverDir string
}

// Runner runs the executions placed on this host.
type Runner struct {
	opts  Options
	procs sessions.Procs
	// draining is held while a drain runs: one at a time.
	draining sync.Mutex
	// drainStarted says that StartDrain's goroutine runs, and drainAgain
	// (under mu) that it must drain once more, with againMessage: a drain
	// asked for while one runs is not lost, as an execution started after
	// that one's listing would run on (the host withdrawn, lent again,
	// withdrawn again).
	drainStarted, drainAgain bool
	againMessage             string

	mu   sync.Mutex
	runs map[types.UID]*run
	// orphans are the executions being reported AgentRestarted: one report
	// each, however many watch events come while it is retried.
	orphans map[types.UID]bool
	// ended are the executions this runner ran and reported, the report
	// taken or refused: one the server still shows running (its final
	// report refused) was not started before a restart, and is not
	// reported again as if it had been. Forgotten when it is deleted.
	ended map[types.UID]bool
	// placed lists the executions placed on this host, from the watch.
	placed func() []*nodusv1.Execution
}

// run is one execution on this host, from its start to its final report.
type run struct {
	namespace, name string
	uid             types.UID
	gpus            []int32
	// The sandbox's limits the server gave it, which it holds while it runs.
	memoryMiB, milliCPUs int64
	since                time.Time // when this agent took it
	account              string
	out                  *tail
	started              chan struct{} // closed once the process runs (or failed to)
	// stopping is closed when the agent first decides to stop it: a
	// preparation still under way is not waited for.
	stopping chan struct{}
	// prepared is closed once no preparation of its sandbox is under way
	// (or none was ever started).
	prepared chan struct{}
	done     chan struct{} // closed when the process has exited
	reported chan struct{} // closed when its end was reported (or never will be)

	mu   sync.Mutex
	pgid int
	box  *sandbox.Sandbox
	stop *outcome // why the agent stopped it, if it did
}

// outcome is how an execution ended, as reported.
type outcome struct {
	phase   nodusv1.ExecutionPhase
	reason  string
	message string
	exit    *int32
}

// New returns a runner; Run starts it.
func New(opts Options) *Runner {
	if opts.LogEvery == 0 {
		opts.LogEvery = 2 * time.Second
	}
	return &Runner{opts: opts, procs: sessions.Procs{Root: "/proc"}, runs: map[types.UID]*run{}, orphans: map[types.UID]bool{},
		ended: map[types.UID]bool{}}
}

// Accounts are the borrower accounts executions run as.
func (r *Runner) Accounts() []string {
	if r.opts.Slots <= 0 {
		return []string{r.opts.User}
	}
	out := make([]string, r.opts.Slots)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", r.opts.User, i)
	}
	return out
}

// resync re-offers every execution on the host to the runner, so that one
// whose start could not be reported is tried again.
const resync = 30 * time.Second

// Sweep removes what executions left on this host: the sandboxes, every
// process of the borrower accounts, and the work directories. The agent
// sweeps when it starts, before it asks the server anything — what an
// earlier agent left must not outlive it, whether the server answers or
// not — and when it stops, after its executions had their grace. It needs
// no server: Options without a Client do.
func (r *Runner) Sweep(ctx context.Context) {
	if r.opts.Sandbox != nil {
		if err := r.opts.Sandbox.RemoveAll(); err != nil {
			klog.ErrorS(err, "removing the executions' sandboxes")
		}
	}
	r.endBorrowerProcesses(ctx)
	if err := r.workRoot(); err != nil {
		klog.ErrorS(err, "not sweeping the executions' directory: no execution starts here until it is the agent's alone; restart nodusd once it is, for its start to sweep what earlier executions left there")
		return
	}
	if entries, err := os.ReadDir(r.opts.WorkRoot); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(r.opts.WorkRoot, e.Name()))
		}
	}
}

// Shutdown waits, once ctx (Run's) has ended, for the executions to end
// (each is stopped: SIGTERM, SIGKILL after the grace), at most wait, then
// sweeps what is left: nothing of a borrower outlives the agent.
func (r *Runner) Shutdown(wait time.Duration) {
	r.mu.Lock()
	runs := make([]*run, 0, len(r.runs))
	for _, x := range r.runs {
		runs = append(runs, x)
	}
	r.mu.Unlock()
	deadline := time.After(wait)
	for _, x := range runs {
		select {
		case <-x.reported:
		case <-deadline:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.opts.Grace+10*time.Second)
	defer cancel()
	r.Sweep(ctx)
}

// Run watches the executions placed on this host until ctx ends. What the
// borrower account still runs, and the work directories, from before are
// removed first (Sweep): this agent did not start them and cannot account
// for them.
func (r *Runner) Run(ctx context.Context) error {
	r.Sweep(ctx)
	factory := externalversions.NewSharedInformerFactoryWithOptions(r.opts.Client, resync,
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "status.host=" + r.opts.Alias }))
	informer := factory.Nodus().V1().Executions().Informer()
	r.placed = func() []*nodusv1.Execution {
		var out []*nodusv1.Execution
		for _, obj := range informer.GetStore().List() {
			out = append(out, obj.(*nodusv1.Execution))
		}
		return out
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { r.observe(ctx, obj.(*nodusv1.Execution)) },
		UpdateFunc: func(_, obj interface{}) { r.observe(ctx, obj.(*nodusv1.Execution)) },
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if e, ok := obj.(*nodusv1.Execution); ok {
				r.stopRun(e.UID, outcome{phase: nodusv1.ExecutionCancelled, reason: ReasonCancelled, message: "the execution was deleted"})
				r.mu.Lock()
				delete(r.ended, e.UID)
				r.mu.Unlock()
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// Running is how many processes the borrower accounts have on the host:
// what really runs, including anything an execution left behind. An error
// says they could not all be listed: at least that many run.
func (r *Runner) Running() (int, error) {
	uids, lookupErr := r.accountUIDs()
	pids, err := r.procs.PIDsOf(uids...)
	return len(pids), errors.Join(lookupErr, err)
}

// accountUIDs are the uids of the borrower accounts that exist, except the
// agent's own (a development setup runs executions as itself), and why an
// account could not be looked up.
func (r *Runner) accountUIDs() ([]int, error) {
	var uids []int
	var errs []error
	for _, account := range r.Accounts() {
		uid, err := r.procs.UIDOf(account)
		if err != nil {
			errs = append(errs, err)
		}
		if uid > 0 && uid != os.Geteuid() {
			uids = append(uids, uid)
		}
	}
	return uids, errors.Join(errs...)
}

// Active says whether anything of borrowers is on the host: an execution
// being started, run or reported, or a process of the borrower account.
// Processes that cannot be listed count as active: the host is not shown
// free of borrowers.
func (r *Runner) Active() bool {
	r.mu.Lock()
	n := len(r.runs)
	r.mu.Unlock()
	running, err := r.Running()
	return n > 0 || running > 0 || err != nil
}

// endBorrowerProcesses ends every process of the borrower accounts, all in
// one grace period.
func (r *Runner) endBorrowerProcesses(ctx context.Context) {
	uids, lookupErr := r.accountUIDs()
	if err := errors.Join(lookupErr, r.procs.EndUIDs(ctx, uids, r.opts.Grace)); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "ending the borrower accounts' processes: the host stays busy until they are shown ended")
	}
}

// endAccount ends every process of account, unless it is the agent's own
// (a development setup).
func (r *Runner) endAccount(ctx context.Context, account string) {
	uid, err := r.procs.UIDOf(account)
	if err != nil {
		klog.ErrorS(err, "ending the processes of a borrower account: it takes no execution until they are shown ended", "account", account)
	}
	if uid > 0 && uid != os.Geteuid() {
		if err := r.procs.End(ctx, account, r.opts.Grace); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "ending the processes of a borrower account: it takes no execution until they are shown ended", "account", account)
		}
	}
}

// Drain stops every execution as drained and ends whatever else the borrower
// account runs, returning when nothing of it is left (or ctx ends).
func (r *Runner) Drain(ctx context.Context, message string) {
	r.draining.Lock()
	defer r.draining.Unlock()
	r.drain(ctx, message)
}

// StartDrain drains in the background; asked for while its drain runs, it
// drains once more after it.
func (r *Runner) StartDrain(ctx context.Context, message string) {
	r.mu.Lock()
	if r.drainStarted {
		r.drainAgain, r.againMessage = true, message
		r.mu.Unlock()
		return
	}
	r.drainStarted = true
	r.mu.Unlock()
	go func() {
		for {
			r.Drain(ctx, message)
			r.mu.Lock()
			if !r.drainAgain || ctx.Err() != nil {
				r.drainStarted, r.drainAgain = false, false
				r.mu.Unlock()
				return
			}
			message, r.drainAgain = r.againMessage, false
			r.mu.Unlock()
		}
	}()
}

func (r *Runner) drain(ctx context.Context, message string) {
	r.mu.Lock()
	runs := make([]*run, 0, len(r.runs))
	for _, x := range r.runs {
		runs = append(runs, x)
	}
	r.mu.Unlock()
	for _, x := range runs {
		r.stop(x, outcome{phase: nodusv1.ExecutionDrained, reason: ReasonDrained, message: message})
	}
	r.endBorrowerProcesses(ctx)
	// The ends are reported before the agent's next heartbeat can say that
	// nothing runs: a drained execution's finishedAt precedes drainedAt.
	deadline := time.After(reportWait)
	for _, x := range runs {
		select {
		case <-x.reported:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}

// reportWait bounds how long a drain waits for the server to take the
// reports; the process evidence in heartbeats does not depend on them.
const reportWait = 15 * time.Second

func (r *Runner) observe(ctx context.Context, e *nodusv1.Execution) {
	r.mu.Lock()
	x, known := r.runs[e.UID]
	r.mu.Unlock()
	switch {
	case !known && e.Status.Phase == nodusv1.ExecutionScheduled:
		r.start(ctx, e)
	case !known && e.Status.Phase == nodusv1.ExecutionRunning:
		// Started by this host before the agent restarted (whose start
		// ended what the borrower account ran): say so.
		r.mu.Lock()
		reporting := r.orphans[e.UID] || r.ended[e.UID]
		if !reporting {
			r.orphans[e.UID] = true
		}
		r.mu.Unlock()
		if reporting {
			return
		}
		go func() {
			defer func() {
				r.mu.Lock()
				delete(r.orphans, e.UID)
				r.mu.Unlock()
			}()
			r.report(ctx, e.Namespace, e.Name, e.UID, outcome{phase: nodusv1.ExecutionFailed, reason: ReasonAgentRestarted,
				message: "the host agent restarted while the execution ran; its processes were ended"}, "", 0)
		}()
	case known && e.Status.Phase == nodusv1.ExecutionRunning && e.Status.CancelRequestedAt != nil:
		r.stop(x, outcome{phase: nodusv1.ExecutionCancelled, reason: ReasonCancelled, message: "cancelled by the borrower while it ran"})
	case known && e.Status.Phase == nodusv1.ExecutionRunning && e.Status.DrainRequestedAt != nil:
		// The owner withdrew the host (whether or not this agent saw it),
		// or the pool no longer lends to the borrower: the server says which.
		r.stop(x, outcome{phase: nodusv1.ExecutionDrained, reason: ReasonDrained, message: lending.WhyDrained(e.Status.Message)})
	case known && (e.Status.Phase == nodusv1.ExecutionCancelled || e.Status.Phase == nodusv1.ExecutionDrained):
		r.stop(x, outcome{phase: e.Status.Phase, reason: e.Status.Reason, message: e.Status.Message})
	}
}

func (r *Runner) stopRun(uid types.UID, o outcome) {
	r.mu.Lock()
	x := r.runs[uid]
	r.mu.Unlock()
	if x != nil {
		r.stop(x, o)
	}
}

// stop ends x's process group: SIGTERM, and SIGKILL after the grace period.
// The first reason to stop it is the one reported; an execution not started
// yet is not started at all.
func (r *Runner) stop(x *run, o outcome) {
	x.mu.Lock()
	first := x.stop == nil
	if first {
		x.stop = &o
		if x.stopping != nil {
			close(x.stopping)
		}
	}
	x.mu.Unlock()
	if !first {
		return // already being stopped: TERM went out, KILL follows
	}
	go func() {
		<-x.started
		x.signal(syscall.SIGTERM)
		// KILL after the grace, and again until it has ended: a signal
		// that could not be sent (see signal) must not leave it running.
		wait := r.opts.Grace
		for {
			select {
			case <-x.done:
				return
			case <-time.After(wait):
				x.signal(syscall.SIGKILL)
				wait = max(r.opts.Grace, killRetry)
			}
		}
	}()
}

// killRetry is the least time between two SIGKILLs of one execution.
const killRetry = time.Second

// signal sends sig to every process of the execution: its sandbox, or its
// process group while it is its own (once the group is gone, its id may
// belong to someone else).
func (x *run) signal(sig syscall.Signal) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.box != nil:
		if err := x.box.Signal(sig); err != nil {
			klog.ErrorS(err, "signalling an execution's sandbox", "execution", x.uid)
		}
	case x.pgid > 0:
		_ = syscall.Kill(-x.pgid, sig)
	}
}

// stopped is why the agent stopped x, or nil.
func (x *run) stopped() *outcome {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.stop
}

// start claims the execution (reports it running), then runs it.
//
// The host itself never runs two executions on one GPU, whatever it is told:
// one whose GPUs are still held here waits until they are free.
func (r *Runner) start(ctx context.Context, e *nodusv1.Execution) {
	agreement, _ := r.agreement()
	r.mu.Lock()
	// One this runner ran and reported is never run again: a cache that
	// still shows it scheduled (the watch behind the run's own reports)
	// offers it again, and the server takes a repeated start as a repeat.
	if _, ok := r.runs[e.UID]; ok || r.ended[e.UID] {
		r.mu.Unlock()
		return
	}
	if holder := r.holder(e.Status.GPUIndices); holder != nil {
		r.mu.Unlock()
		klog.InfoS("execution waits for GPUs held on this host", "execution", e.UID,
			"gpus", e.Status.GPUIndices, "heldBy", holder.uid)
		return
	}
	if over := r.overShare(agreement, e); over != "" {
		r.mu.Unlock()
		klog.InfoS("execution waits for the lent "+over+" the executions running here hold", "execution", e.UID)
		return
	}
	account := r.freeAccount()
	if account == "" {
		r.mu.Unlock()
		klog.InfoS("execution waits for a free borrower account", "execution", e.UID, "slots", r.opts.Slots)
		return
	}
	x := &run{namespace: e.Namespace, name: e.Name, uid: e.UID, gpus: e.Status.GPUIndices, account: account, out: newTail(),
		memoryMiB: e.Status.MemoryLimitMiB, milliCPUs: e.Status.MilliCPUs, since: time.Now(),
		started: make(chan struct{}), stopping: make(chan struct{}), prepared: make(chan struct{}), done: make(chan struct{}),
		reported: make(chan struct{})}
	r.runs[e.UID] = x
	r.mu.Unlock()
	go func() {
		var final *outcome
		defer func() {
			r.mu.Lock()
			// Only an end reported here: one the server shows running
			// after a start that never ran (a claim that landed late) is
			// still reported as an orphan. One that already left the
			// watch (the server shows an agent no finished execution) is
			// never offered again, and is not kept.
			if final != nil && r.inView(e.UID) {
				r.ended[e.UID] = true
			}
			r.mu.Unlock()
			close(x.reported)
			// A preparation its stop abandoned (see prepare) holds the
			// run's GPUs and account until it ends: one at a time each,
			// however often a borrower submits and cancels while an
			// image's unpacking hangs.
			<-x.prepared
			r.mu.Lock()
			delete(r.runs, e.UID)
			r.mu.Unlock()
			r.offerWaiting(ctx)
		}()
		final = r.execute(ctx, e, x)
		if final == nil {
			return
		}
		text, dropped, _ := x.out.Snapshot()
		r.report(ctx, e.Namespace, e.Name, e.UID, *final, text, dropped)
	}()
}

// inView says whether the watch still shows the execution (true before the
// watch started: it may yet).
func (r *Runner) inView(uid types.UID) bool {
	if r.placed == nil {
		return true
	}
	for _, e := range r.placed() {
		if e.UID == uid {
			return true
		}
	}
	return false
}

// holder is the run holding any of gpus, or nil; r.mu is held.
func (r *Runner) holder(gpus []int32) *run {
	for _, x := range r.runs {
		for _, g := range x.gpus {
			if slices.Contains(gpus, g) {
				return x
			}
		}
	}
	return nil
}

// freeAccount is the account for a new execution, or "" when every slot is
// taken; r.mu is held. Without slots every execution shares the one account.
// A slot is free when no run holds it and nothing of it still runs.
func (r *Runner) freeAccount() string {
	accounts := r.Accounts()
	if r.opts.Slots <= 0 {
		return accounts[0]
	}
	taken := map[string]bool{}
	for _, x := range r.runs {
		taken[x.account] = true
	}
	for _, account := range accounts {
		if taken[account] {
			continue
		}
		uid, err := r.procs.UIDOf(account)
		if err != nil {
			continue // an account that cannot be looked up is not shown free
		}
		if uid <= 0 {
			return account
		}
		// A count that failed is no proof the last execution's processes
		// are gone: the account is not free.
		if n, err := r.procs.Count(account); err == nil && n == 0 {
			return account
		}
	}
	return ""
}

// offerWaiting starts the scheduled executions that waited for GPUs or an account.
func (r *Runner) offerWaiting(ctx context.Context) {
	if r.placed == nil || ctx.Err() != nil {
		return
	}
	for _, e := range r.placed() {
		if e.Status.Phase == nodusv1.ExecutionScheduled {
			r.start(ctx, e)
		}
	}
}

// execute runs e and returns how it ended, or nil when it must not be
// reported (another party already ended it).
func (r *Runner) execute(ctx context.Context, e *nodusv1.Execution, x *run) *outcome {
	defer close(x.done)
	// Every way out closes x.prepared, unless a preparation started (see
	// prepare, which closes it when that ends).
	preparing := false
	defer func() {
		if !preparing {
			close(x.prepared)
		}
	}()
	startedOnce := false
	markStarted := func() {
		if !startedOnce {
			startedOnce = true
			close(x.started)
		}
	}
	defer markStarted()

	notLent := &outcome{phase: nodusv1.ExecutionDrained, reason: ReasonDrained, message: "the host stopped being lent before the execution started"}
	agreement, lent := r.agreement()
	if !lent {
		return notLent
	}
	if err := checkPlacement(e, agreement); err != nil {
		klog.ErrorS(err, "refusing an execution's placement", "execution", e.UID)
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonInvalidPlacement, message: "the host agent refused the placement: " + err.Error()}
	}
	err := r.claim(ctx, e)
	switch {
	case isReason(err, "HostNotLent"):
		return notLent
	case err != nil && !apioutcome.Final(err):
		// The server stayed unreachable, but a start whose answer was lost
		// may have landed.
		klog.InfoS("not starting execution: its start is unconfirmed", "execution", e.UID, "err", logged(err, e.Namespace, e.Name))
		return r.unconfirmedStart(ctx, e)
	case err != nil:
		// Cancelled or deleted meanwhile: it did not start here.
		klog.InfoS("not starting execution", "execution", e.UID, "err", logged(err, e.Namespace, e.Name))
		return nil
	}

	if r.opts.Sandbox == nil && r.opts.SandboxError != nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: r.opts.SandboxError.Error()}
	}
	cred, err := r.account(x.account)
	if err != nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: err.Error()}
	}
	if r.opts.Sandbox != nil && cred == nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed,
			message: "the host agent runs as the borrower account itself and cannot sandbox it; run nodusd as root"}
	}
	dir := filepath.Join(r.opts.WorkRoot, string(e.UID))
	if err := r.workDir(dir, cred); err != nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: "preparing the work directory: " + err.Error()}
	}
	// Only a directory this run made is removed with it.
	defer os.RemoveAll(dir)
	// In an image the command is found in the image, by the runtime.
	path := e.Spec.Command[0]
	if e.Spec.Image == "" {
		if path, err = lookPath(e.Spec.Command[0]); err != nil {
			return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: err.Error()}
		}
	} else if r.opts.Sandbox == nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: "images run only in a sandbox; this host runs executions without one"}
	}
	// The sandbox is prepared without x.mu, and a stop does not wait for
	// it (see prepare).
	var box *sandbox.Sandbox
	if r.opts.Sandbox != nil && x.stopped() == nil {
		preparing = true
		box, err = r.prepare(x, sandbox.Spec{
			ID: "nodus-" + string(e.UID), Args: append([]string{path}, e.Spec.Command[1:]...),
			Env: Environment(e, x.account, sandbox.WorkDir, r.hostGPUs()), UID: cred.Uid, GID: cred.Gid, HostWorkDir: dir,
			GPUs: e.Status.GPUIndices, Pids: DefaultPidsLimit, Network: network(e),
			MemoryBytes: e.Status.MemoryLimitMiB << 20, MilliCPUs: e.Status.MilliCPUs, Image: e.Spec.Image,
		})
		if err == nil {
			defer func() {
				if err := box.Close(); err != nil {
					klog.ErrorS(err, "removing an execution's sandbox", "execution", e.UID)
				}
			}()
		}
	}
	// A drain or cancel that came while it was being prepared wins.
	x.mu.Lock()
	if x.stop != nil {
		x.mu.Unlock()
		return x.stop
	}
	if _, lent := r.agreement(); !lent {
		x.mu.Unlock()
		return notLent
	}
	var wait func() error
	if r.opts.Sandbox != nil {
		if err == nil {
			if err = box.Run(x.out); err == nil {
				x.box, wait = box, box.Wait
			}
		}
	} else {
		cmd := &exec.Cmd{Path: path, Args: e.Spec.Command}
		cmd.Dir = dir
		cmd.Env = Environment(e, x.account, dir, r.hostGPUs())
		cmd.Stdout, cmd.Stderr = x.out, x.out
		// A process it leaves behind (setsid, nohup) may hold its output open:
		// the execution still ends when its own process does.
		cmd.WaitDelay = outputDrain
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
		if err = cmd.Start(); err == nil {
			x.pgid = cmd.Process.Pid
			wait = cmd.Wait
		}
	}
	x.mu.Unlock()
	if errors.Is(err, sandbox.ErrImageNotFound) {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonImageNotFound, message: err.Error()}
	}
	if err != nil {
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed, message: err.Error()}
	}
	markStarted()

	exited := make(chan error, 1)
	go func() { exited <- wait() }()
	limit := time.NewTimer(time.Duration(e.Spec.MaxRuntimeSeconds) * time.Second)
	defer limit.Stop()
	upload := time.NewTicker(r.opts.LogEvery)
	defer upload.Stop()
	var sent int64
	for {
		select {
		case err := <-exited:
			// What it left in its process group goes with it; then the
			// group id is no longer ours to signal. An account of its own
			// takes what escaped the group, too.
			x.signal(syscall.SIGKILL)
			oom := x.box != nil && x.box.OOMKilled()
			x.mu.Lock()
			x.pgid = 0
			x.mu.Unlock()
			if r.opts.Slots > 0 {
				r.endAccount(ctx, x.account)
			}
			if stopped := x.stopped(); stopped != nil {
				return stopped
			}
			if oom {
				return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonOutOfMemory, exit: exitOutcome(err).exit,
					message: "the kernel ended it at its memory limit"}
			}
			return exitOutcome(err)
		case <-limit.C:
			r.stop(x, outcome{phase: nodusv1.ExecutionFailed, reason: ReasonMaxRuntimeExceeded,
				message: fmt.Sprintf("stopped after its maximum runtime of %ds", e.Spec.MaxRuntimeSeconds)})
		case <-upload.C:
			text, dropped, version := x.out.Snapshot()
			if version != sent {
				if _, err := r.post(ctx, e.Namespace, e.Name, e.UID, &nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Log: text, LogDroppedBytes: dropped}); err == nil {
					sent = version
				}
			}
		case <-ctx.Done():
			// The agent stops; the execution is ended with it, and the
			// restarted agent reports it.
			r.stop(x, outcome{phase: nodusv1.ExecutionFailed, reason: ReasonAgentRestarted, message: "the host agent stopped"})
			<-exited
			x.signal(syscall.SIGKILL)
			x.mu.Lock()
			x.pgid = 0
			x.mu.Unlock()
			return nil
		}
	}
}

func exitOutcome(err error) *outcome {
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		zero := int32(0)
		return &outcome{phase: nodusv1.ExecutionSucceeded, reason: ReasonExited, message: "exited with status 0", exit: &zero}
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code := int32(exitErr.ExitCode())
		msg := fmt.Sprintf("exited with status %d", code)
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int32(ws.Signal())
			msg = "ended by signal " + ws.Signal().String()
		}
		return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonExited, message: msg, exit: &code}
	}
	return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonExited, message: err.Error()}
}
