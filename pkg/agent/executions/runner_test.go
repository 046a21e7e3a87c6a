package executions

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/nvidiagpus"
	"github.com/nodus-dev/nodus/pkg/agent/sessions"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

func TestEnvironmentShowsOnlyAssignedGPUs(t *testing.T) {
	e := &nodusv1.Execution{Spec: nodusv1.ExecutionSpec{Env: []nodusv1.ExecutionEnv{
		{Name: "EPOCHS", Value: "3"}, {Name: "CUDA_VISIBLE_DEVICES", Value: "0,1,2,3,4,5,6,7"},
		{Name: "NODUS_GPU_INDICES", Value: "0"}}}}
	e.Name = "job-1"
	e.Status.GPUIndices = []int32{2, 5}
	var host []nvidiagpus.GPU
	for i := range 8 {
		host = append(host, nvidiagpus.GPU{Bus: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Minor: 7 - i,
			UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)})
	}
	lastValues := func(env []string) map[string]string {
		last := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			last[k] = v // exec uses the last value of a repeated name
		}
		return last
	}
	byUUID := "GPU-00000002-0000-0000-0000-000000000000,GPU-00000005-0000-0000-0000-000000000000"
	for name, c := range map[string]struct {
		host    []nvidiagpus.GPU
		visible string
	}{
		// In a sandbox CUDA counts only the GPUs whose nodes it has: the
		// host's indices 2 and 5 would be no GPU there.
		"the driver's list": {host, byUUID},
		"no driver":         {nil, "2,5"},
		"a UUID hidden":     {append(slices.Clone(host[:5]), nvidiagpus.GPU{Bus: "0000:15:00.0", Minor: 2}), "2,5"},
	} {
		env := Environment(e, "nodus-borrower", "/work/x", c.host)
		last := lastValues(env)
		want := map[string]string{"CUDA_VISIBLE_DEVICES": c.visible, "NVIDIA_VISIBLE_DEVICES": c.visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
			"NODUS_GPU_INDICES": "2,5", "EPOCHS": "3", "HOME": "/work/x", "TMPDIR": "/work/x", "USER": "nodus-borrower", "NODUS_EXECUTION": "job-1"}
		for k, v := range want {
			if last[k] != v {
				t.Errorf("%s: %s=%q, want %q (env %v)", name, k, last[k], v, env)
			}
		}
	}
	e.Status.GPUIndices = nil
	env := Environment(e, "nodus-borrower", "/work/x", host)
	if last := lastValues(env); last["CUDA_VISIBLE_DEVICES"] != "" || last["NVIDIA_VISIBLE_DEVICES"] != "void" || last["NODUS_GPU_INDICES"] != "" {
		t.Errorf("an execution without GPUs must see none: %v", env)
	}
}

func TestTailKeepsTheEndAndCountsTheRest(t *testing.T) {
	tl := &tail{Limit: 10}
	_, _ = tl.Write([]byte("0123456789"))
	_, _ = tl.Write([]byte("abcde"))
	data, dropped, version := tl.Snapshot()
	if data != "56789abcde" || dropped != 5 || version != 2 {
		t.Errorf("tail %q dropped %d version %d", data, dropped, version)
	}
	// Byte by byte, past the point where it compacts.
	all := "0123456789abcde"
	for i := range 37 {
		b := byte('A' + i)
		all += string(b)
		_, _ = tl.Write([]byte{b})
	}
	data, dropped, _ = tl.Snapshot()
	if data != all[len(all)-10:] || dropped != int64(len(all)-10) {
		t.Errorf("after %d bytes: tail %q dropped %d", len(all), data, dropped)
	}
}

func TestExitOutcome(t *testing.T) {
	if o := exitOutcome(nil); o.phase != nodusv1.ExecutionSucceeded || *o.exit != 0 {
		t.Errorf("exit 0: %+v", o)
	}
	err := exec.Command("sh", "-c", "exit 3").Run()
	if o := exitOutcome(err); o.phase != nodusv1.ExecutionFailed || *o.exit != 3 {
		t.Errorf("exit 3: %+v", o)
	}
	err = exec.Command("sh", "-c", "kill -TERM $$").Run()
	if o := exitOutcome(err); o.phase != nodusv1.ExecutionFailed || *o.exit != 143 || !strings.Contains(o.message, "terminated") {
		t.Errorf("killed: %+v %s", o, o.message)
	}
	// A child left behind holds the output open: the execution still ends
	// when its own process exits, and counts as succeeded.
	out := newTail()
	left := exec.Command("sh", "-c", "sleep 600 & echo done")
	left.Stdout, left.WaitDelay = out, outputDrain
	left.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-left.Process.Pid, syscall.SIGKILL)
	waited := make(chan error, 1)
	go func() { waited <- left.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(60 * time.Second):
		t.Fatal("the execution never ended while its child held the output")
	}
	if o := exitOutcome(err); o.phase != nodusv1.ExecutionSucceeded {
		t.Errorf("a child holding the output: %v → %+v", err, o)
	}
	if text, _, _ := out.Snapshot(); !strings.Contains(text, "done") {
		t.Errorf("output of an execution that left a child: %q", text)
	}
}

func TestHostNeverStartsTwoExecutionsOnOneGPU(t *testing.T) {
	r := New(Options{})
	r.runs["a"] = &run{namespace: "beta", name: "first", uid: "a", gpus: []int32{2, 5}}
	e := &nodusv1.Execution{}
	e.Namespace, e.Name, e.UID = "gamma", "second", "b"
	e.Status.Phase, e.Status.GPUIndices = nodusv1.ExecutionScheduled, []int32{5, 6}
	r.start(context.Background(), e)
	if len(r.runs) != 1 {
		t.Fatalf("an execution on a GPU in use was started: %v", r.runs)
	}
	if h := r.holder([]int32{0, 1, 3}); h != nil {
		t.Errorf("free GPUs are reported held by %s", h.name)
	}
	if h := r.holder([]int32{2}); h == nil || h.name != "first" {
		t.Errorf("GPU 2 is held by first, got %v", h)
	}
}

func TestSlotsGiveEachExecutionAnAccountOfItsOwn(t *testing.T) {
	shared := New(Options{User: "nodus-borrower"})
	if got := shared.Accounts(); !slices.Equal(got, []string{"nodus-borrower"}) {
		t.Errorf("without slots: %v", got)
	}
	shared.runs["a"] = &run{account: "nodus-borrower"}
	if got := shared.freeAccount(); got != "nodus-borrower" {
		t.Errorf("without slots executions share the account: %q", got)
	}

	r := New(Options{User: "nodus-test-no-such-user", Slots: 2})
	if got := r.Accounts(); !slices.Equal(got, []string{"nodus-test-no-such-user-0", "nodus-test-no-such-user-1"}) {
		t.Errorf("with 2 slots: %v", got)
	}
	r.runs["a"] = &run{account: "nodus-test-no-such-user-0"}
	if got := r.freeAccount(); got != "nodus-test-no-such-user-1" {
		t.Errorf("the free slot: %q", got)
	}
	r.runs["b"] = &run{account: "nodus-test-no-such-user-1"}
	if got := r.freeAccount(); got != "" {
		t.Errorf("every slot is taken, got %q", got)
	}
}

// A report's message is cut to what the server's validation takes, whole
// characters only, so that a long error never gets the report refused.
func TestFitMessageKeepsReportsAcceptable(t *testing.T) {
	for _, m := range []string{strings.Repeat("e", 5000), strings.Repeat("é", 3000), "short"} {
		got := fitMessage(m)
		report := &nodusv1.ExecutionReport{Phase: nodusv1.ExecutionFailed, Reason: ReasonStartFailed, Message: got}
		if errs := validation.ValidateExecutionReport(report); len(errs) > 0 {
			t.Errorf("a message of %d bytes cut to %d: %v", len(m), len(got), errs)
		}
		if !utf8.ValidString(got) || (len(m) <= validation.MaxReportText && got != m) {
			t.Errorf("fitMessage(%d bytes) = %q", len(m), got)
		}
	}
}

// TestADrainAskedForDuringAnotherIsNotLost: the host is withdrawn (a drain
// runs, waiting for its reports), lent again, an execution starts, and the
// host is withdrawn again before the first drain ends. The second drain
// must still happen: the execution started after the first one's listing.
func TestADrainAskedForDuringAnotherIsNotLost(t *testing.T) {
	r := New(Options{User: "nodus-no-such-borrower", Grace: 10 * time.Millisecond})
	r.procs = sessions.Procs{Root: t.TempDir()}
	closed := func() chan struct{} { c := make(chan struct{}); close(c); return c }
	add := func(x *run) {
		r.mu.Lock()
		r.runs[x.uid] = x
		r.mu.Unlock()
	}
	waitStopped := func(x *run) *outcome {
		deadline := time.Now().Add(5 * time.Second)
		for x.stopped() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return x.stopped()
	}
	// The first drain waits for the report of what it stopped.
	early := &run{namespace: "borrower", name: "early", uid: "early", started: closed(), done: closed(), reported: make(chan struct{})}
	add(early)
	r.StartDrain(context.Background(), "withdrawn")
	if o := waitStopped(early); o == nil {
		t.Fatal("the first drain did not stop the execution")
	}
	late := &run{namespace: "borrower", name: "late", uid: "late", started: closed(), done: closed(), reported: closed()}
	add(late)
	r.StartDrain(context.Background(), "withdrawn again")
	close(early.reported)
	if o := waitStopped(late); o == nil || o.phase != nodusv1.ExecutionDrained || o.message != "withdrawn again" {
		t.Fatalf("the execution started during a drain, after a second withdrawal: stopped %+v, want drained", o)
	}
}

// TestAnExecutionRunsOnlyWithinItsShare: the limits the server sets must be
// within the execution's share of what the owner lends, and never turn into
// no limit, or a negative one, on their way to the sandbox (MiB shifted to
// bytes, thousandths of a CPU to a CFS quota). An agreement without caps
// (one made before they existed) whose caps this agent could not fill from
// the host's figures (lending.WithHostShare) runs nothing: its share is no
// limit at all.
func TestAnExecutionRunsOnlyWithinItsShare(t *testing.T) {
	uncapped := &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8}
	capped := &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 8 << 10, MilliCPUs: 8000}
	placed := func(memoryMiB, milliCPUs int64) *nodusv1.Execution {
		e := &nodusv1.Execution{Spec: nodusv1.ExecutionSpec{Command: []string{"true"}, GPUs: 1, MaxRuntimeSeconds: 3600}}
		e.UID = "0b6a5b0e-4f7c-4f57-9a4e-3c9d0a1e2f30"
		e.Status.GPUIndices = []int32{3}
		e.Status.MemoryLimitMiB, e.Status.MilliCPUs = memoryMiB, milliCPUs
		return e
	}
	cases := []struct {
		name      string
		e         *nodusv1.Execution
		agreement *nodusv1.ReservationLending
		ok        bool
	}{
		{"uncapped, no limits", placed(0, 0), uncapped, false},
		{"uncapped, limits", placed(1<<10, 1000), uncapped, false},
		{"uncapped memory only", placed(1<<10, 1000), &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MilliCPUs: 8000}, false},
		{"memory that overflows as bytes", placed(1<<44, 1000), capped, false},
		{"CPUs that overflow as a quota", placed(1<<10, 1<<60), capped, false},
		{"a negative limit", placed(-1, 1000), capped, false},
		{"capped, its share", placed(1<<10, 1000), capped, true},
		{"capped, below its share", placed(512, 500), capped, true},
		{"capped, no memory limit", placed(0, 1000), capped, false},
		{"capped, twice its CPU share", placed(1<<10, 2000), capped, false},
		{"more GPUs than lent", placed(1<<10, 1000), &nodusv1.ReservationLending{Lent: true, MaxGPUs: 0, MaxExecutions: 1}, false},
	}
	// A maximum runtime the server refuses: none, or one that overflows
	// as nanoseconds into no limit at all.
	for _, seconds := range []int64{0, -1, 1 << 40} {
		e := placed(1<<10, 1000)
		e.Spec.MaxRuntimeSeconds = seconds
		cases = append(cases, struct {
			name      string
			e         *nodusv1.Execution
			agreement *nodusv1.ReservationLending
			ok        bool
		}{fmt.Sprintf("a maximum runtime of %d s", seconds), e, capped, false})
	}
	for _, tc := range cases {
		if err := checkPlacement(tc.e, tc.agreement); (err == nil) != tc.ok {
			t.Errorf("%s: checkPlacement = %v, want accepted %v", tc.name, err, tc.ok)
		}
	}
}

// TestHostNeverRunsMoreThanTheOwnerLends: the owner's machine does not take
// the server's word that the executions it places fit together within
// what the owner lends: one whose limits would take the running ones past
// the agreement's memory or CPUs waits, as it waits for GPUs held.
func TestHostNeverRunsMoreThanTheOwnerLends(t *testing.T) {
	lent := &nodusv1.ReservationLending{Lent: true, MaxGPUs: 4, MaxExecutions: 4, MemoryMiB: 1024, MilliCPUs: 8000}
	// An account free, so that only the share holds an execution back.
	r := New(Options{User: "nodus-borrower", Lending: func() *nodusv1.ReservationLending { return lent }})
	r.runs["a"] = &run{namespace: "beta", name: "big", uid: "a", gpus: []int32{0, 1, 2, 3}, memoryMiB: 1024, milliCPUs: 8000}
	placed := func(uid types.UID, memoryMiB, milliCPUs int64) *nodusv1.Execution {
		e := &nodusv1.Execution{}
		e.Namespace, e.Name, e.UID = "beta", "small-"+string(uid), uid
		e.Status.Phase, e.Status.MemoryLimitMiB, e.Status.MilliCPUs = nodusv1.ExecutionScheduled, memoryMiB, milliCPUs
		return e
	}
	for _, over := range []*nodusv1.Execution{placed("b", 256, 0), placed("c", 0, 2000)} {
		r.start(context.Background(), over)
		if len(r.runs) != 1 {
			t.Fatalf("an execution past the agreement's share beside the running one was started: %v", r.runs)
		}
	}
	r.runs["a"].memoryMiB, r.runs["a"].milliCPUs = 512, 4000
	if got := r.overShare(lent, placed("d", 512, 4000)); got != "" {
		t.Errorf("an execution that fits beside the running one waits for %s", got)
	}
	if got := r.overShare(lent, placed("e", 513, 4000)); got != "memory" {
		t.Errorf("one MiB past the agreement: %q, want memory", got)
	}
	// Past the agreement on its own: waiting would not help; checkPlacement refuses it.
	if got := r.overShare(lent, placed("g", 1025, 0)); got != "" {
		t.Errorf("an execution past the agreement on its own waits for %s, rather than be refused", got)
	}
	if got := r.overShare(nil, placed("f", 1<<20, 1<<20)); got != "" {
		t.Errorf("a runner without an agreement (not lending) holds back %s", got)
	}
	// GPUs and executions together, as memory and CPUs: 4 more GPUs,
	// free ones, beside the 4 running under an agreement of 4.
	onGPUs := placed("h", 256, 1000)
	onGPUs.Spec.GPUs, onGPUs.Status.GPUIndices = 4, []int32{4, 5, 6, 7}
	if got := r.overShare(lent, onGPUs); got != "GPUs" {
		t.Errorf("4 GPUs beside 4 running, under an agreement of 4: %q, want GPUs", got)
	}
	one := *lent
	one.MaxExecutions = 1
	if got := r.overShare(&one, placed("i", 256, 1000)); got != "executions" {
		t.Errorf("a second execution under an agreement of one: %q, want executions", got)
	}
}

// TestLendingFewerStopsTheNewestBeyondIt: the owner lends the host again
// with smaller caps while borrowers' executions run. What runs must come
// within the new agreement: the newest executions beyond it are stopped
// (drained), the oldest keep running, and what fits is left alone.
func TestLendingFewerStopsTheNewestBeyondIt(t *testing.T) {
	agreement := &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 8 << 10, MilliCPUs: 8000}
	r := New(Options{User: "nodus-no-such-borrower", Grace: 10 * time.Millisecond, Lending: func() *nodusv1.ReservationLending { return agreement }})
	r.procs = sessions.Procs{Root: t.TempDir()}
	closed := func() chan struct{} { c := make(chan struct{}); close(c); return c }
	now := time.Now()
	var runs []*run
	for i, gpus := range [][]int32{{0, 1}, {2, 3}, {4, 5}, {6, 7}} {
		x := &run{namespace: "borrower", name: fmt.Sprint("e", i), uid: types.UID(fmt.Sprint("e", i)), gpus: gpus, memoryMiB: 2 << 10, milliCPUs: 2000,
			since: now.Add(time.Duration(i) * time.Second), started: closed(), done: make(chan struct{}), reported: closed()}
		t.Cleanup(func() { close(x.done) }) // its stop signals until it has ended
		runs = append(runs, x)
		r.runs[x.uid] = x
	}
	// The oldest of all ended and waits for its report: it holds nothing.
	ended := &run{namespace: "borrower", name: "ended", uid: "ended", gpus: []int32{8, 9, 10, 11}, memoryMiB: 8 << 10, milliCPUs: 8000,
		since: now.Add(-time.Hour), started: closed(), done: closed(), reported: make(chan struct{})}
	r.runs[ended.uid] = ended
	r.Trim()
	for _, x := range runs {
		if x.stopped() != nil {
			t.Fatalf("%s stopped within the agreement: %+v", x.name, x.stopped())
		}
	}
	// Fewer GPUs: the two newest go.
	agreement = &nodusv1.ReservationLending{Lent: true, MaxGPUs: 4, MaxExecutions: 8, MemoryMiB: 8 << 10, MilliCPUs: 8000}
	r.Trim()
	if ended.stopped() != nil {
		t.Errorf("an execution that ended was stopped: %+v", ended.stopped())
	}
	for i, x := range runs {
		o := x.stopped()
		if stop := i >= 2; (o != nil) != stop {
			t.Errorf("lent 4 GPUs: %s (started %d s after the first) stopped: %+v, want stopped %v", x.name, i, o, stop)
		}
		if o != nil && (o.phase != nodusv1.ExecutionDrained || o.reason != ReasonDrained) {
			t.Errorf("%s stopped as %+v, want drained", x.name, o)
		}
	}
	// Fewer executions, less memory or fewer CPUs: each counts.
	for _, fewer := range []*nodusv1.ReservationLending{
		{Lent: true, MaxGPUs: 8, MaxExecutions: 1, MemoryMiB: 8 << 10, MilliCPUs: 8000},
		{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 3 << 10, MilliCPUs: 8000},
		{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 8 << 10, MilliCPUs: 2500},
	} {
		runs[1].mu.Lock()
		runs[1].stop = nil
		runs[1].mu.Unlock()
		agreement = fewer
		r.Trim()
		if runs[0].stopped() != nil || runs[1].stopped() == nil {
			t.Errorf("lent %+v: the oldest stopped %v, the second %v; want only the second", fewer, runs[0].stopped(), runs[1].stopped())
		}
	}
}

// TestTheAgentsLogNamesNoBorrower: nodusd's log goes to the system journal,
// which the adm and systemd-journal groups read, and an owner's login user
// may be in one. A pool that does not show borrowers keeps their projects
// from the owner: the log names an execution by its UID, not by its
// project and name.
func TestTheAgentsLogNamesNoBorrower(t *testing.T) {
	state := klog.CaptureState()
	t.Cleanup(state.Restore)
	journal := &lockedBuffer{}
	klog.LogToStderr(false)
	klog.SetOutput(journal)
	r := New(Options{})
	r.runs["uid-of-the-first"] = &run{namespace: "beta-project", name: "first-run", uid: "uid-of-the-first", gpus: []int32{2, 5}}
	e := &nodusv1.Execution{}
	e.Namespace, e.Name, e.UID = "gamma-project", "second-run", "uid-of-the-second"
	e.Status.Phase, e.Status.GPUIndices = nodusv1.ExecutionScheduled, []int32{5, 6}
	r.start(context.Background(), e)
	klog.Flush()
	out := journal.String()
	if !strings.Contains(out, "execution waits for GPUs held on this host") || !strings.Contains(out, "uid-of-the-second") ||
		!strings.Contains(out, "uid-of-the-first") {
		t.Fatalf("the wait is not logged with the executions' UIDs: %q", out)
	}
	for _, borrower := range []string{"beta-project", "gamma-project", "first-run", "second-run"} {
		if strings.Contains(out, borrower) {
			t.Errorf("nodusd's log names %s: %q", borrower, out)
		}
	}
	// What a report's failure logs: not the request's URL, nor the
	// server's message, which name them.
	unreachable := &url.Error{Op: "Post", URL: "https://server/apis/nodus.dev/v1/namespaces/beta-project/executions/first-run/report", Err: syscall.ECONNREFUSED}
	refused := apierrors.NewConflict(nodusv1.Resource("executions"), "first-run", fmt.Errorf("execution %q never started: it cannot have succeeded", "first-run"))
	busy := apierrors.NewServiceUnavailable("etcd is not ready")
	for err, want := range map[error]string{
		unreachable: "Post: connection refused",
		refused:     `refused 409 Conflict: Operation cannot be fulfilled on executions.nodus.dev <execution>: execution <execution> never started: it cannot have succeeded`,
		busy:        "the server answered 503 ServiceUnavailable: etcd is not ready",
	} {
		if got := logged(err, "beta-project", "first-run").Error(); got != want {
			t.Errorf("%v is logged as %q, want %q", err, got, want)
		}
	}
}

// lockedBuffer is a bytes.Buffer klog may write while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
