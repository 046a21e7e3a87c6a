package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/agent/executions"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAStartWhoseAnswerWasLostStillRuns runs the host agent's execution
// runner against the real server through a proxy that loses the answers to
// its first two reports, the start and its first retry, after the server
// took them (a 504, as when a load balancer gives up on a slow answer).
// The start landed: the runner must send it again until it is answered,
// and run the execution, not leave it "running" on the server, with
// nothing running, until a resync fails it as if the agent had restarted.
func TestAStartWhoseAnswerWasLostStillRuns(t *testing.T) {
	f := lentHost(t)

	var cut atomic.Int32
	var landed atomic.Int32
	proxy := lossyProxy(t, f.agents[lentNode], func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/report") || cut.Add(1) > 2 {
			return false
		}
		if loseAnswer(w, req, forward) == http.StatusOK {
			landed.Add(1)
		}
		return true
	})

	startRunner(t, f, proxy)
	submitted := submitTrue(t, f, "")
	final := f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
	if landed.Load() != 2 {
		t.Fatalf("the server took %d of the two reports whose answers the proxy lost, want both", landed.Load())
	}
	if final.Status.Phase != nodusv1.ExecutionSucceeded {
		t.Errorf("the execution whose start answer was lost ended %s (%s: %s), want it run to success",
			final.Status.Phase, final.Status.Reason, final.Status.Message)
	}
}

// TestAStartThatLandedUnansweredDoesNotStayRunning: the start report lands
// but its answer is lost, and every retry fails (an etcd election longer
// than the retries). The runner gives up without running it, while the
// server shows it running: its GPUs, slot and the borrower's cap would stay
// taken for ever, past the withdrawal and the reservation's end. The runner
// reports it failed (StartFailed) instead.
func TestAStartThatLandedUnansweredDoesNotStayRunning(t *testing.T) {
	f := lentHost(t)

	var starts atomic.Int32
	proxy := lossyProxy(t, f.agents[lentNode], func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if report, ok := reportIn(t, req); !ok || report.Phase != nodusv1.ExecutionRunning {
			return false
		}
		if starts.Add(1) == 1 {
			if code := loseAnswer(w, req, forward); code != http.StatusOK {
				t.Errorf("the first start report: %d", code)
			}
			return true
		}
		answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "etcd has no leader")
		return true
	})

	runner := startRunner(t, f, proxy)
	submitted := submitTrue(t, f, "")
	final := f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
	if final.Status.Phase != nodusv1.ExecutionFailed || final.Status.Reason != "StartFailed" {
		t.Errorf("the execution whose start the server took unanswered ended %s (%s: %s), want failed StartFailed",
			final.Status.Phase, final.Status.Reason, final.Status.Message)
	}
	if n := starts.Load(); n < 2 {
		t.Errorf("the runner sent its start %d times, want it retried", n)
	}
	if runner.Active() {
		t.Error("the runner still holds the execution")
	}
}

// TestARefusedFinalReportIsNotSentAgain runs the host agent's execution
// runner against the real server through a proxy that refuses its final
// report with 422 Invalid, a refusal the server does not send today (a
// newer server validating a field this agent fills, say). Sending the same
// report again cannot change that answer, and while the runner keeps
// sending it, it holds the execution's GPUs on the host: it must give up
// after the refusal and free them, as it does for the refusals it knows.
func TestARefusedFinalReportIsNotSentAgain(t *testing.T) {
	f := lentHost(t)

	var refusals atomic.Int32
	proxy := lossyProxy(t, f.agents[lentNode], func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
		if report, ok := reportIn(t, req); !ok || !report.Phase.Finished() {
			return false
		}
		refusals.Add(1)
		answerStatus(w, http.StatusUnprocessableEntity, "Invalid", "a field of the report is invalid")
		return true
	})

	runner := startRunner(t, f, proxy)
	submitted := submitTrue(t, f, "")
	f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionRunning })
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) { return refusals.Load() > 0, nil }); err != nil {
		t.Fatalf("the execution's final report never came: %v", err)
	}
	// The runner used to try again after 1, 2, then 4 s: holding it 5 s more.
	if err := testfleet.Eventually(ctx(t), 5*time.Second, func(context.Context) (bool, error) { return !runner.Active(), nil }); err != nil {
		t.Fatalf("the runner still holds the execution 5 s after its final report was refused (%d refusals): %v", refusals.Load(), err)
	}
	// The server still shows the execution running; a change of it that
	// the runner sees (here its annotations) is not an execution started
	// before a restart, to report failed again.
	if _, err := f.s.Client.NodusV1().Executions("beta").Patch(ctx(t), submitted.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a second report, if any, is sent at once
	if n := refusals.Load(); n != 1 {
		t.Errorf("the runner sent its refused final report %d times, want once", n)
	}
}

// TestAnExecutionRunningBeforeARestartIsReportedOnce: an execution the
// server shows running on a host whose agent restarted (so it runs nothing)
// is reported failed, AgentRestarted, by the runner. Every watch event of
// that execution used to start one more report, each retrying on its own
// while the server failed: an outage of an hour left some 120 loops per
// execution, all sending when it came back. One report at a time, here
// through a proxy that fails the runner's reports until told.
func TestAnExecutionRunningBeforeARestartIsReportedOnce(t *testing.T) {
	f := lentHost(t)
	submitted := submitTrue(t, f, "")
	f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	// Started by the agent before it restarted.
	if r := f.report(t, lentNode, "beta", submitted.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusOK {
		t.Fatalf("the start: %d %s", r.code, r.body)
	}

	var down atomic.Bool
	down.Store(true)
	var failed, forwarded atomic.Int32
	proxy := lossyProxy(t, f.agents[lentNode], func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/report") {
			return false
		}
		if !down.Load() {
			forwarded.Add(1)
			return false
		}
		failed.Add(1)
		answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is restarting")
		return true
	})
	startRunner(t, f, proxy)
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return failed.Load() > 0, nil }); err != nil {
		t.Fatal("the restarted runner never reported the execution it does not run")
	}
	// Three more watch events of the execution while its report fails.
	beta := f.s.Client.NodusV1().Executions("beta")
	for i := range 3 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touched":"%d"}}}`, i)
		if _, err := beta.Patch(ctx(t), submitted.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	down.Store(false)
	final := f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
	if final.Status.Phase != nodusv1.ExecutionFailed || final.Status.Reason != executions.ReasonAgentRestarted {
		t.Errorf("the execution ended %s (%s), want failed (%s)", final.Status.Phase, final.Status.Reason, executions.ReasonAgentRestarted)
	}
	// Each report loop sends once more after the server came back, within
	// its back-off (at most 4 s after three failures in 1.5 s).
	time.Sleep(6 * time.Second)
	if n := forwarded.Load(); n != 1 {
		t.Errorf("%d reports of the one execution reached the server after it came back, want 1 (%d failed before)", n, failed.Load())
	}
}

// TestAPlacementTheAgentCannotTrustIsRefused: nodusd runs as root and
// turns what the server says of an execution into paths, a command line,
// devices and limits. A server that lies (compromised, or a proxy in between
// that is) must not make it do more than run the borrower's command in
// its sandbox: an execution UID that is a path ("../victim") must not
// become a work directory beside the work root (whose failed creation
// then removed the victim, as root); an empty command must not crash the
// agent; more GPUs than the execution asked for must not be exposed; its
// memory and CPU limits must stay within its share of what the owner
// lends (the owner's own work runs beside it). The
// runner here reads its executions through a proxy that rewrites them;
// each placement must end failed, InvalidPlacement, and nothing of the
// host be touched.
func TestAPlacementTheAgentCannotTrustIsRefused(t *testing.T) {
	victim, err := os.MkdirTemp("", "nodus-victim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(victim) })
	canary := filepath.Join(victim, "canary")
	if err := os.WriteFile(canary, []byte("the operator's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, lie := range map[string]struct{ from, to string }{
		// The work root is also under the system's temporary directory.
		"a UID that is a path": {`("name":"job-lie","namespace":"beta","uid":")[0-9a-f-]{36}"`, `${1}../` + filepath.Base(victim) + `"`},
		"an empty command":     {`"command":\["true"\]`, `"command":[]`},
		"more GPUs than asked": {`"gpuIndices":\[\d\]`, `"gpuIndices":[0,1,2,3,4,5,6,7]`},
		// The owner lends a share of the host's memory and CPUs; a limit
		// of 0 is none, and one of 2^44 MiB is 0 bytes once shifted.
		"no memory limit":       {`"memoryLimitMiB":\d+`, `"memoryLimitMiB":0`},
		"more memory than lent": {`"memoryLimitMiB":\d+`, `"memoryLimitMiB":17592186044416`},
		"no CPU limit":          {`"milliCPUs":\d+`, `"milliCPUs":0`},
		"more CPUs than lent":   {`"milliCPUs":\d+`, `"milliCPUs":224000`},
	} {
		t.Run(name, func(t *testing.T) {
			f := lentHost(t)
			from := regexp.MustCompile(lie.from)
			proxy := lossyProxy(t, f.agents[lentNode], func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
				if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/executions") {
					return false
				}
				// Plain answers to rewrite: the proxy's own transport asks
				// for gzip and unpacks it.
				req.Header.Del("Accept-Encoding")
				forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(lie.to)}, req)
				return true
			})
			startRunner(t, f, proxy)
			submitTrue(t, f, "job-lie")
			final := f.waitExecution(t, "beta", "job-lie", func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
			if final.Status.Phase != nodusv1.ExecutionFailed || final.Status.Reason != executions.ReasonInvalidPlacement {
				t.Errorf("the execution ended %s (%s: %s), want failed (%s)", final.Status.Phase, final.Status.Reason, final.Status.Message, executions.ReasonInvalidPlacement)
			}
			if _, err := os.Stat(canary); err != nil {
				t.Fatalf("a file beside the work root: %v", err)
			}
		})
	}
}

// TestAReportIsCheckedBeforeAnythingIsWritten: an agent's report is input
// like any other. A message larger than the store takes was a 500 (etcd
// refused the write) and one just under it was kept; a final report that
// the execution's end refuses replaced its kept output first.
func TestAReportIsCheckedBeforeAnythingIsWritten(t *testing.T) {
	f := lentHost(t)
	submitted := submitTrue(t, f, "")
	f.waitExecution(t, "beta", submitted.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	report := func(rep nodusv1.ExecutionReport) response {
		return f.report(t, lentNode, "beta", submitted.Name, rep)
	}
	if r := report(nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusOK {
		t.Fatalf("the start: %d %s", r.code, r.body)
	}
	for what, rep := range map[string]nodusv1.ExecutionReport{
		"a message of 1.5 MiB":      {Phase: nodusv1.ExecutionFailed, Reason: "Exited", Message: strings.Repeat("m", 1536<<10)},
		"a message of 2 KiB":        {Phase: nodusv1.ExecutionFailed, Reason: "Exited", Message: strings.Repeat("m", 2<<10)},
		"a reason that is a phrase": {Phase: nodusv1.ExecutionFailed, Reason: "it exited, badly"},
		"negative dropped bytes":    {Phase: nodusv1.ExecutionFailed, Reason: "Exited", LogDroppedBytes: -1},
		// With the server's own cut of a long log added, the count wrapped
		// negative and the note of earlier output went.
		"dropped bytes that wrap": {Phase: nodusv1.ExecutionFailed, Reason: "Exited", LogDroppedBytes: math.MaxInt64, Log: strings.Repeat("l", nodusv1.MaxExecutionLogBytes+1)},
	} {
		if r := report(rep); r.code != http.StatusUnprocessableEntity || envelopeOf(t, r).Reason != metav1.StatusReasonInvalid {
			t.Errorf("a report with %s: %d %.300s", what, r.code, r.body)
		}
	}
	if r := report(nodusv1.ExecutionReport{Phase: nodusv1.ExecutionSucceeded, Reason: "Exited", Log: "the output\n"}); r.code != http.StatusOK {
		t.Fatalf("the end: %d %s", r.code, r.body)
	}
	if r := report(nodusv1.ExecutionReport{Phase: nodusv1.ExecutionDrained, Reason: "Drained", Log: "other output\n"}); r.code != http.StatusConflict ||
		envelopeOf(t, r).Reason != apierror.ReasonExecutionFinished {
		t.Errorf("another end after the end: %d %s", r.code, r.body)
	}
	if r := do(t, f.borrowers["beta"], "GET", "/apis/nodus.dev/v1/namespaces/beta/executions/"+submitted.Name+"/log", "", nil); r.code != http.StatusOK ||
		string(r.body) != "the output\n" {
		t.Errorf("the kept output after a refused report: %d %q", r.code, r.body)
	}
}

// TestAReportOfAnEarlierExecutionOfTheNameIsRefused: the agent's final
// report of an execution lands, its answer is lost, and the agent sends it
// again after the borrower deleted the execution and made another of the
// same name, placed on the same host. The late report names the execution
// it is about by UID: it moves nothing of the new one, nor replaces its
// output.
func TestAReportOfAnEarlierExecutionOfTheNameIsRefused(t *testing.T) {
	f := lentHost(t)
	first := submitTrue(t, f, "reused")
	f.waitExecution(t, "beta", "reused", func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	report := func(rep nodusv1.ExecutionReport) response {
		return f.report(t, lentNode, "beta", "reused", rep)
	}
	if r := report(nodusv1.ExecutionReport{UID: first.UID, Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusOK {
		t.Fatalf("the first one's start: %d %s", r.code, r.body)
	}
	end := nodusv1.ExecutionReport{UID: first.UID, Phase: nodusv1.ExecutionSucceeded, Reason: "Exited", Log: "the first one's output\n"}
	if r := report(end); r.code != http.StatusOK {
		t.Fatalf("the first one's end: %d %s", r.code, r.body)
	}
	beta := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	if err := beta.Delete(ctx(t), "reused", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(c context.Context) (bool, error) {
		_, err := beta.Get(c, "reused", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the first execution was not deleted")
	}
	second := submitTrue(t, f, "reused")
	f.waitExecution(t, "beta", "reused", func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if r := report(nodusv1.ExecutionReport{UID: first.UID, Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusNotFound {
		t.Errorf("the first one's start again, on the second: %d %s", r.code, r.body)
	}
	if r := report(nodusv1.ExecutionReport{UID: second.UID, Phase: nodusv1.ExecutionRunning, Reason: "Started", Log: "the second one's output\n"}); r.code != http.StatusOK {
		t.Fatalf("the second one's start: %d %s", r.code, r.body)
	}
	if r := report(end); r.code != http.StatusNotFound {
		t.Errorf("the first one's end again, on the second: %d %s", r.code, r.body)
	}
	got, err := beta.Get(ctx(t), "reused", metav1.GetOptions{})
	if err != nil || got.UID != second.UID || got.Status.Phase != nodusv1.ExecutionRunning {
		t.Errorf("the second execution after the first one's late reports: %v %+v", err, got.Status)
	}
	if r := do(t, f.borrowers["beta"], "GET", "/apis/nodus.dev/v1/namespaces/beta/executions/reused/log", "", nil); r.code != http.StatusOK ||
		string(r.body) != "the second one's output\n" {
		t.Errorf("the second one's output after the first one's late end: %d %q", r.code, r.body)
	}
}

// TestAWithdrawalTheAgentMissesStillDrains: the owner withdraws and lends
// again at once, while its host's agent does not see the moment between
// (its watch broken, or its handler late): it never learns of the
// withdrawal, and borrowers' executions would run on under the new
// agreement. The withdrawal drains a scheduled execution itself, and asks
// the agent to drain a running one (status.drainRequestedAt), which it
// does though it still sees the host lent (this runner's agreement never
// changes).
func TestAWithdrawalTheAgentMissesStillDrains(t *testing.T) {
	f := lentHost(t)
	epoch := f.reservation(t, lentNode).Status.Epoch
	withdrawAndLend := func() {
		t.Helper()
		for _, action := range []string{"withdraw", "lend"} {
			if r := f.lend(t, f.admin, action, lentNode, fmt.Sprintf(`{"epoch":%d}`, epoch)); r.code != http.StatusOK {
				t.Fatalf("%s: %d %s", action, r.code, r.body)
			}
		}
	}
	scheduled := submitTrue(t, f, "")
	f.waitExecution(t, "beta", scheduled.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	withdrawAndLend()
	if got := f.waitExecution(t, "beta", scheduled.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() }); got.Status.Phase != nodusv1.ExecutionDrained {
		t.Errorf("the execution scheduled at the withdrawal ended %s (%s)", got.Status.Phase, got.Status.Message)
	}
	if r := f.report(t, lentNode, "beta", scheduled.Name, nodusv1.ExecutionReport{UID: scheduled.UID, Phase: nodusv1.ExecutionRunning, Reason: "Started"}); r.code != http.StatusConflict {
		t.Errorf("a start of the drained execution: %d %s", r.code, r.body)
	}

	startRunner(t, f, f.agents[lentNode])
	running := runningLong(t, f)
	withdrawAndLend()
	got := f.waitExecution(t, "beta", running.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
	if got.Status.Phase != nodusv1.ExecutionDrained || got.Status.DrainRequestedAt == nil || got.Status.Message != "the owner withdrew the host" {
		t.Errorf("the execution running at the withdrawal ended %s (%s: %s), drain asked at %v", got.Status.Phase, got.Status.Reason, got.Status.Message, got.Status.DrainRequestedAt)
	}
}

// TestAnExecutionOfABorrowerTakenOffThePoolDrains: the operator takes the
// borrower off the pool's borrowers while its execution runs; the host's
// agent, asked to drain it, stops it and reports it drained, saying why
// as the server said it (not "the owner withdrew the host").
func TestAnExecutionOfABorrowerTakenOffThePoolDrains(t *testing.T) {
	f := lentHost(t)
	startRunner(t, f, f.agents[lentNode])
	running := runningLong(t, f)
	f.changePool(t, func(l *nodusv1.PoolLending) { l.Borrowers = nil })
	got := f.waitExecution(t, "beta", running.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase.Finished() })
	if got.Status.Phase != nodusv1.ExecutionDrained || got.Status.DrainRequestedAt == nil || got.Status.Message != "pool gpu no longer lends to project beta" {
		t.Errorf("the execution running when its borrower was taken off ended %s (%s: %s), drain asked at %v", got.Status.Phase, got.Status.Reason, got.Status.Message, got.Status.DrainRequestedAt)
	}
}

// reportIn is the execution report req posts, if it posts one; req's body
// stays for the server to read.
func reportIn(t *testing.T, req *http.Request) (nodusv1.ExecutionReport, bool) {
	var report nodusv1.ExecutionReport
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/report") {
		return report, false
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Error(err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return report, json.Unmarshal(body, &report) == nil
}

// lentNode is the one host of lentHost's fleet.
const lentNode = "gpu-00"

// lentHost is a server with one reserved host, lentNode, lent by its
// owner; project beta may borrow 8 GPUs of it.
func lentHost(t *testing.T) *lendingFleet {
	t.Helper()
	f := newLendingFleet(t, testserver.StartTestServer(t), 1, map[string]int32{"beta": 8}, false)
	epoch := f.reservation(t, lentNode).Status.Epoch
	if r := f.lend(t, f.admin, "lend", lentNode, fmt.Sprintf(`{"epoch":%d}`, epoch)); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	return f
}

// startRunner runs lentNode's execution runner in process until the test
// ends, talking to the server as its agent through config (a proxy's).
func startRunner(t *testing.T, f *lendingFleet, config *rest.Config) *executions.Runner {
	t.Helper()
	account := borrowerAccount(t)
	// Under the system's temporary directory, which the borrower account
	// may pass through (a test's own is closed to other accounts).
	workRoot, err := os.MkdirTemp("", "nodus-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(workRoot) })
	agreement := f.reservation(t, lentNode).Status.Lending
	runner := executions.New(executions.Options{
		Client:     versioned.NewForConfigOrDie(config),
		Alias:      f.aliases[lentNode],
		User:       account,
		WorkRoot:   workRoot,
		Grace:      time.Second,
		LogEvery:   time.Second,
		Lending:    func() *nodusv1.ReservationLending { return agreement },
		OwnerUsers: func() []string { return []string{"ubuntu"} },
	})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = runner.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return runner
}

// runningLong is an execution of beta's that sleeps a minute, once the
// host's runner has started it.
func runningLong(t *testing.T, f *lendingFleet) *nodusv1.Execution {
	t.Helper()
	e, err := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta").Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "long-"},
		Spec:       nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"sleep", "60"}, GPUs: 1, MaxRuntimeSeconds: 120}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionRunning })
}

// submitTrue submits, as project beta, an execution of `true` on one GPU,
// named name (or job-XXXXX when name is "").
func submitTrue(t *testing.T, f *lendingFleet, name string) *nodusv1.Execution {
	t.Helper()
	meta := metav1.ObjectMeta{Name: name}
	if name == "" {
		meta.GenerateName = "job-"
	}
	submitted, err := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta").Create(ctx(t), &nodusv1.Execution{
		ObjectMeta: meta,
		Spec:       nodusv1.ExecutionSpec{Pool: "gpu", Command: []string{"true"}, GPUs: 1, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return submitted
}

// borrowerAccount is an account executions may run as: a system account
// of its own when the test runs as root (executions never run as root),
// else the test's own user, which the runner then runs them as unchanged.
func borrowerAccount(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		return u.Username
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name := "nodust" + hex.EncodeToString(suffix)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("pkill", "-KILL", "-u", name).Run()
		_ = exec.Command("userdel", name).Run()
	})
	return name
}

// TestAnAgentThatCannotReachTheServerStillEndsWhatABorrowerLeft: a
// borrower's process left by an earlier agent (killed, or stopped with a
// sandbox that outlived it) must end when nodusd starts again, before it
// asks the server anything: an agent that cannot reach the server exits
// and is restarted, again and again, and the borrower would run past its
// limits, a withdrawal or its host's release meanwhile.
func TestAnAgentThatCannotReachTheServerStillEndsWhatABorrowerLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a borrower account of its own, whose processes the agent ends (CI runs as root)")
	}
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "lonely", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}, dir)
	borrower := borrowerAccount(t)
	exited := sleepAs(t, borrower)

	down := agentProxy(t, s, dir, func(w http.ResponseWriter, _ *http.Request, _ http.Handler) bool {
		answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is down")
		return true
	})
	a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{down},
		BorrowerUser: borrower, Sandbox: agent.SandboxNone, ExecutionsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	if err := a.Run(runCtx); err == nil {
		t.Fatal("an agent whose server answers nothing but 503 ran")
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the borrower's process an earlier agent left still runs after an agent that could not reach the server started")
	}
}
