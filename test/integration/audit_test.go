package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/actions"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auditlimit"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	SourceIPs []string `json:"sourceIPs"`
	ObjectRef struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject struct {
		Epoch int64 `json:"epoch"`
	} `json:"requestObject"`
	// ResponseObject is the ReservedHost of a success, a Status of a failure.
	ResponseObject json.RawMessage `json:"responseObject"`
	// Level is how much of the exchange was kept.
	Level string `json:"level"`
	// RawRequest is the request body as kept, to see whether it was.
	RawRequest json.RawMessage `json:"-"`
	// Annotations are what the server added to the event.
	Annotations map[string]string `json:"annotations"`
}

// answeredEpoch is the epoch of the ReservedHost in the answer, 0 for errors.
func (e auditEvent) answeredEpoch() int64 {
	var host struct {
		Kind   string `json:"kind"`
		Status struct {
			Reservation struct {
				Epoch int64 `json:"epoch"`
			} `json:"reservation"`
		} `json:"status"`
	}
	if json.Unmarshal(e.ResponseObject, &host) != nil || host.Kind != "ReservedHost" {
		return 0
	}
	return host.Status.Reservation.Epoch
}

// TestAuditRecordsReleases: every release attempt appears in the audit log
// with the user, the host, the epoch, the request id and the outcome.
func TestAuditRecordsReleases(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "h-audit", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	refused := f.release(t, f.admin, "h-audit", `{"agreed":true,"epoch":5}`, "")
	done := f.release(t, f.admin, "h-audit", agreed, "")
	if refused.code != 409 || done.code != 200 {
		t.Fatalf("releases: %d %d", refused.code, done.code)
	}
	want := map[string]auditEvent{}
	deadline := time.Now().Add(30 * time.Second)
	for len(want) < 2 && time.Now().Before(deadline) {
		want = auditEvents(t, filepath.Join(s.DataDir, "audit.log"), "release-capacity")
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		r                        response
		code                     int
		sentEpoch, answeredEpoch int64
	}{{refused, 409, 5, 0}, {done, 200, 1, 2}} {
		id := tc.r.header.Get("X-Request-Id")
		e, ok := want[id]
		if !ok {
			t.Errorf("no audit event for request %s", id)
			continue
		}
		if e.User.Username != "alice" || e.ObjectRef.Namespace != "acme" || e.ObjectRef.Name != "h-audit" ||
			e.ResponseStatus.Code != tc.code || e.RequestObject.Epoch != tc.sentEpoch || e.answeredEpoch() != tc.answeredEpoch {
			t.Errorf("audit event for %s: %+v", id, e)
		}
	}
}

// TestAuditNamesTheRequestAReplayAnswers: an idempotent replay was
// audited as the release done again (a second event, status 200, no mark),
// and read as two releases. It names the request whose answer it is.
func TestAuditNamesTheRequestAReplayAnswers(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "h-replayed", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	first := f.release(t, f.admin, "h-replayed", agreed, "", "Idempotency-Key", "once")
	again := f.release(t, f.admin, "h-replayed", agreed, "", "Idempotency-Key", "once")
	if first.code != 200 || again.code != 200 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("release and its replay: %d %d %q", first.code, again.code, again.header.Get("Idempotent-Replayed"))
	}
	firstID := first.header.Get("X-Request-Id")
	var events map[string]auditEvent
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) {
		events = auditEvents(t, filepath.Join(s.DataDir, "audit.log"), "release-capacity")
		return len(events) >= 2, nil
	}); err != nil {
		t.Fatalf("audit events: %v %+v", err, events)
	}
	var replays, originals int
	for id, e := range events {
		switch e.Annotations[actions.AuditReplayOf] {
		case firstID:
			replays++
		case "":
			if id == firstID {
				originals++
			}
		default:
			t.Errorf("event %s names another request: %v", id, e.Annotations)
		}
	}
	if replays != 1 || originals != 1 {
		t.Errorf("the release and its replay: %d replays naming %s, %d originals: %+v", replays, firstID, originals, events)
	}
}

// auditEvents are the logged events of a subresource, by audit id.
func auditEvents(t *testing.T, path, subresource string) map[string]auditEvent {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer file.Close()
	events := map[string]auditEvent{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		var raw struct {
			RequestObject json.RawMessage `json:"requestObject"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && json.Unmarshal(sc.Bytes(), &raw) == nil && e.ObjectRef.Subresource == subresource {
			e.RawRequest = raw.RequestObject
			events[e.AuditID] = e
		}
	}
	return events
}

// TestAuditRecordsLending: lending and withdrawal are kept with the epoch the
// owner reviewed and the HostLending they produced; agents' reports, which
// carry output, only with who and when.
func TestAuditRecordsLending(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 4}, false)
	epoch := f.reservation(t, "gpu-00").Status.Epoch
	lent := f.lend(t, f.admin, "lend", "gpu-00", fmt.Sprintf(`{"epoch":%d,"maxGPUs":2}`, epoch))
	e := f.submit(t, "beta", 1, 60)
	f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	reported := f.report(t, "gpu-00", "beta", e.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Log: "secret output"})
	withdrawn := f.lend(t, f.admin, "withdraw", "gpu-00", fmt.Sprintf(`{"epoch":%d}`, epoch))
	if lent.code != 200 || reported.code != 200 || withdrawn.code != 200 {
		t.Fatalf("lend %d, report %d, withdraw %d", lent.code, reported.code, withdrawn.code)
	}
	log := filepath.Join(s.DataDir, "audit.log")
	var lends, withdraws, reports map[string]auditEvent
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		lends, withdraws, reports = auditEvents(t, log, "lend"), auditEvents(t, log, "withdraw"), auditEvents(t, log, "report")
		if len(lends) > 0 && len(withdraws) > 0 && len(reports) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for what, tc := range map[string]struct {
		events map[string]auditEvent
		r      response
	}{"lend": {lends, lent}, "withdraw": {withdraws, withdrawn}} {
		ev, ok := tc.events[tc.r.header.Get("X-Request-Id")]
		if !ok || ev.User.Username != "alice" || ev.RequestObject.Epoch != epoch || ev.ResponseStatus.Code != 200 ||
			!strings.Contains(string(ev.ResponseObject), `"kind":"HostLending"`) {
			t.Errorf("audit event of the %s: %v %+v", what, ok, ev)
		}
	}
	ev, ok := reports[reported.header.Get("X-Request-Id")]
	if !ok || ev.Level != "Metadata" || len(ev.RawRequest) != 0 || ev.User.Username != "nodus:node:gpu-00" {
		t.Errorf("audit event of the report: %v %+v %s", ok, ev, ev.RawRequest)
	}
}

// TestAuditRecordsIronicWritesNotSecrets: writes through the Ironic API
// are in the audit log with who, the path, the answer and the body; an
// Execution's environment, which borrowers use for secrets, never is.
func TestAuditRecordsIronicWritesNotSecrets(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "gpu-audit")
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lends"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-e1b4c0a7"
	exec := `{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"with-secret"},"spec":{"pool":"lends","command":["train"],` +
		`"maxRuntimeSeconds":60,"env":[{"name":"API_TOKEN","value":"` + secret + `"}]}}`
	if r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/executions", "application/json", strings.NewReader(exec)); r.code != 201 {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	// The scheduler's status write (no lent host: it waits) sends the
	// whole Execution, environment included.
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(c context.Context) (bool, error) {
		e, err := s.Client.NodusV1().Executions("acme").Get(c, "with-secret", metav1.GetOptions{})
		return err == nil && e.Status.Reason == "Waiting", err
	}); err != nil {
		t.Fatalf("the scheduler never wrote the execution's status: %v", err)
	}
	patch := `{"op":"replace","path":"/extra/rack","value":"r12"}`
	r := do(t, s.Config, "PATCH", "/v1/nodes/gpu-audit", "application/json", strings.NewReader("["+patch+"]"), "OpenStack-API-Version", "baremetal 1.55")
	if r.code != 200 {
		t.Fatalf("Ironic PATCH: %d %s", r.code, r.body)
	}
	id := strings.TrimPrefix(r.header.Get("X-Openstack-Request-Id"), "req-")
	var event map[string]interface{}
	log := filepath.Join(s.DataDir, "audit.log")
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(log)
		for _, line := range strings.Split(string(data), "\n") {
			var e map[string]interface{}
			if json.Unmarshal([]byte(line), &e) == nil && e["auditID"] == id && e["stage"] == "ResponseComplete" {
				event = e
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no audit event for the Ironic write %s", id)
	}
	annotations, _ := event["annotations"].(map[string]interface{})
	user, _ := event["user"].(map[string]interface{})
	if event["requestURI"] != "/v1/nodes/gpu-audit" || event["verb"] != "patch" || user["username"] != "nodus-admin" ||
		!strings.Contains(fmt.Sprint(annotations["nodus.dev/ironic-request"]), `"/extra/rack"`) {
		t.Errorf("the Ironic write's audit event: %v", event)
	}
	// A BMC's password, as Ironic's clients send it (refused: Nodus keeps
	// no driver_info), is not kept either.
	const bmcPassword = "bmc-0d9f3e"
	bmc := `[{"op":"add","path":"/driver_info/ipmi_password","value":"` + bmcPassword + `"},{"op":"add","path":"/driver_info/ipmi_username","value":"admin"}]`
	if r := do(t, s.Config, "PATCH", "/v1/nodes/gpu-audit", "application/json", strings.NewReader(bmc), "OpenStack-API-Version", "baremetal 1.55"); r.code < 400 {
		t.Errorf("a driver_info patch: %d %s", r.code, r.body)
	}
	var data []byte
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		data, _ = os.ReadFile(log)
		return strings.Contains(string(data), "ipmi_password"), nil
	}); err != nil {
		t.Fatal("the driver_info patch is not in the audit log")
	}
	if strings.Contains(string(data), bmcPassword) || !strings.Contains(string(data), "ipmi_username") {
		t.Errorf("the audit log of a BMC password's patch: %t %t", strings.Contains(string(data), bmcPassword), strings.Contains(string(data), "ipmi_username"))
	}
	if strings.Contains(string(data), secret) {
		t.Error("an execution's environment value is in the audit log")
	}
	if !strings.Contains(string(data), `"executions"`) {
		t.Error("the execution's creation is not in the audit log at all")
	}
}

// TestControllersWritesAreAuditedAsTheServer: the controllers write as the
// server's loopback user, through the API in process (pkg/loopback) or, the
// allocation controller's claims and status writes, to the stores in
// process (pkg/localwrite). Either way each write is in the audit log as
// that user, from the loopback address: here the allocation controller's
// claim of a node.
func TestControllersWritesAreAuditedAsTheServer(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "audited-claim")
	c, ctx := s.Client.NodusV1(), ctx(t)
	if _, err := c.Allocations().Create(ctx, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "audited"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := testfleet.Eventually(ctx, 30*time.Second, func(c2 context.Context) (bool, error) {
		a, err := c.Allocations().Get(c2, "audited", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive, nil
	})
	if err != nil {
		t.Fatalf("the allocation did not become active: %v", err)
	}
	var claims []auditEvent
	err = testfleet.Eventually(ctx, 30*time.Second, func(context.Context) (bool, error) {
		claims = nil
		for _, e := range auditEvents(t, filepath.Join(s.DataDir, "audit.log"), "status") {
			var node nodusv1.Node
			if e.ObjectRef.Resource == "nodes" && e.ObjectRef.Name == "audited-claim" &&
				json.Unmarshal(e.RawRequest, &node) == nil && node.Status.Allocation == "audited" {
				claims = append(claims, e)
			}
		}
		return len(claims) > 0, nil
	})
	if err != nil {
		t.Fatalf("no audit event of the node's claim: %v", err)
	}
	for _, e := range claims {
		if e.Verb != "update" || e.User.Username != user.APIServerUser || fmt.Sprint(e.SourceIPs) != "[127.0.0.1]" || e.ResponseStatus.Code != 200 {
			t.Errorf("the claim's audit event: %s by %q from %v, answered %d", e.Verb, e.User.Username, e.SourceIPs, e.ResponseStatus.Code)
		}
	}
}

// TestALongRequestURIIsRefusedBeforeTheAuditLog: the audit log keeps each
// request's URI and the addresses its proxies name (X-Forwarded-For), a
// failed authentication's too, and a header may carry a megabyte: anyone
// reaching the port wrote a megabyte of log on etcd's disk per request. A
// URI past 16 KiB, or forwarded addresses past 1 KiB, are refused first,
// with their reasons, and leave nothing in the log; a request within the
// bounds is answered as before.
func TestALongRequestURIIsRefusedBeforeTheAuditLog(t *testing.T) {
	s := testserver.StartTestServer(t)
	anonymous := rest.AnonymousClientConfig(s.Config)
	const marker = "uri-bound-e5d2"
	long := "/apis/nodus.dev/v1/namespaces/acme/executions?labelSelector=" + marker + "&pad=" + strings.Repeat("a", 64<<10)
	for _, cfg := range []*rest.Config{anonymous, s.Config} {
		r := do(t, cfg, "GET", long, "", nil)
		if r.code != http.StatusRequestURITooLong || !strings.Contains(string(r.body), `"reason":"RequestURITooLong"`) ||
			!strings.Contains(string(r.body), "docs/errors/RequestURITooLong") {
			t.Errorf("a 64 KiB URI: %d %.300s", r.code, r.body)
		}
	}
	forwarded := strings.TrimSuffix(strings.Repeat("10.9.8.7,", 7000), ",")
	if r := do(t, anonymous, "POST", "/apis/nodus.dev/v1/reservations?labelSelector="+marker, "application/json", strings.NewReader("{}"),
		"X-Forwarded-For", forwarded); r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "X-Forwarded-For") {
		t.Errorf("64 KiB of X-Forwarded-For: %d %.300s", r.code, r.body)
	}
	r := do(t, s.Config, "PATCH", "/v1/nodes/x?pad="+strings.Repeat("a", 64<<10), "application/json", strings.NewReader("[]"), "OpenStack-API-Version", "baremetal 1.55")
	if r.code != http.StatusRequestURITooLong || !strings.Contains(string(r.body), "error_message") {
		t.Errorf("a 64 KiB URI under /v1: %d %.300s", r.code, r.body)
	}
	within := "/apis/nodus.dev/v1/namespaces/acme/executions?labelSelector=" + marker + "-within"
	if r := do(t, anonymous, "GET", within, "", nil); r.code != http.StatusUnauthorized {
		t.Errorf("an unauthenticated request within the bound: %d %.300s", r.code, r.body)
	}
	// The request within the bound is logged (its failed authentication):
	// once it is, the refused ones, sent before it, would be too.
	log := filepath.Join(s.DataDir, "audit.log")
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(log)
		return strings.Contains(string(data), marker+"-within"), nil
	}); err != nil {
		t.Fatal("the unauthenticated request within the bound never reached the audit log")
	}
	data, _ := os.ReadFile(log)
	if n := strings.Count(string(data), strings.Repeat("a", 1024)); n > 0 {
		t.Errorf("the audit log holds %d of the refused long requests (%d bytes)", n, len(data))
	}
	if n := strings.Count(string(data), "10.9.8.7"); n > 0 {
		t.Errorf("the audit log holds %d addresses of the refused X-Forwarded-For (%d bytes)", n, len(data))
	}
}

// TestTheAuditLogKeepsWhatItsFlagsSay: the audit log's files were the
// library's defaults, 100 files of 100 MB, with no flag to change them (or
// to send the events off the machine): a disk could not be sized for it,
// nor a history kept longer. --audit-log-maxsize and --audit-log-maxbackup
// bound it, and the built-in policy's copy in DIR says it is rewritten.
func TestTheAuditLogKeepsWhatItsFlagsSay(t *testing.T) {
	dir := t.TempDir()
	s, err := testserver.Start(dir, nil, func(o *server.Options) { o.AuditLogMaxSize, o.AuditLogMaxBackups = 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Audited with their request (a write to a Nodus object): 200 KB each.
	for i := range 16 {
		body := fmt.Sprintf(`{"metadata":{"annotations":{"note":%q}}}`, strings.Repeat(string(rune('a'+i)), 200<<10))
		if r := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/pools/fra2", "application/merge-patch+json", strings.NewReader(body)); r.code != http.StatusOK {
			t.Fatalf("patch: %d %.200s", r.code, r.body)
		}
	}
	var files []string
	var total int64
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		matches, err := filepath.Glob(filepath.Join(dir, "audit*.log"))
		files, total = matches, 0
		for _, f := range matches {
			if info, err := os.Stat(f); err == nil {
				total += info.Size()
			}
		}
		return len(matches) == 2, err
	}); err != nil {
		t.Fatalf("the audit log's files: %v (%d bytes), want the log and one rotated file: %v", files, total, err)
	}
	if total > 3<<20 {
		t.Errorf("the audit log holds %d bytes in %v, past two files of 1 MB", total, files)
	}
	policy, err := os.ReadFile(filepath.Join(dir, "audit-policy.yaml"))
	if err != nil || !strings.HasPrefix(string(policy), "# Written by nodus-server at each start") {
		t.Errorf("the built-in policy's copy does not say it is rewritten: %v %.120s", err, policy)
	}
}

// TestUnauthenticatedRequestsCannotFloodTheAuditLog: the policy records
// failed authentications (who tried what), and anyone who reaches the port
// can send them: a flood rotated the log until the record of what tenants
// did was gone. Past a budget they are counted, not written; what others
// do is written as before.
func TestUnauthenticatedRequestsCannotFloodTheAuditLog(t *testing.T) {
	s := testserver.StartTestServer(t)
	anonymous := rest.AnonymousClientConfig(s.Config)
	const marker = "audit-flood-7c1f"
	const sent = 400
	start := time.Now()
	for i := 0; i < sent; i++ {
		if r := do(t, anonymous, "GET", fmt.Sprintf("/apis/nodus.dev/v1/namespaces/acme/executions?labelSelector=%s-%d", marker, i), "", nil); r.code != http.StatusUnauthorized {
			t.Fatalf("an unauthenticated request: %d %.300s", r.code, r.body)
		}
	}
	elapsed := time.Since(start)
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(s.DataDir, "audit.log")
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(log)
		return strings.Contains(string(data), `"name":"`+marker+`"`), nil
	}); err != nil {
		t.Fatal("an operator's write after the flood never reached the audit log")
	}
	data, _ := os.ReadFile(log)
	written := strings.Count(string(data), marker+"-")
	budget := auditlimit.Burst + int(elapsed.Seconds()*auditlimit.PerSecond) + auditlimit.PerSecond
	if written == 0 || written > budget {
		t.Errorf("%d of %d unauthenticated requests in %s were written to the audit log; want some, at most %d", written, sent, elapsed, budget)
	}
}
