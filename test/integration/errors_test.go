package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/docs"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// unreachable lists the registered reasons that no well-behaved client can
// provoke on a healthy server, with why. Every other reason must be provoked
// by TestEveryReasonIsReachable.
var unreachable = map[metav1.StatusReason]string{
	metav1.StatusReasonInternalError:      "a server bug; there is none to trigger on purpose",
	metav1.StatusReasonServerTimeout:      "storage that stops answering mid-request",
	metav1.StatusReasonServiceUnavailable: "the server starting up, shutting down, or losing etcd",
	metav1.StatusReasonTooManyRequests:    "more concurrent requests than --max-requests-inflight (400)",
	// The watch cache answers old resource versions and continue tokens from
	// memory, so etcd compaction reaches clients only when a watch falls out
	// of the cache's event window; kept registered because client-go's
	// reflectors act on it.
	metav1.StatusReasonGone:    "a watch that falls behind the watch cache's event window",
	metav1.StatusReasonExpired: "a continue token older than the watch cache's window and etcd's compaction",
}

// provokedElsewhere lists the reasons another test provokes, with that test:
// those that take a server with other bounds than the default to provoke in
// reasonable time, and those that take a scene of their own.
var provokedElsewhere = map[metav1.StatusReason]string{
	apierror.ReasonExecutionLimitReached:  "TestNoCallerCanFillEtcd (a project bound of 20 executions)",
	apierror.ReasonTooManyIdempotencyKeys: "TestNoCallerCanFillEtcd (30 kept answers per caller)",
	// Only an Ironic client chooses a UUID, and /v1 answers in Ironic's body.
	apierror.ReasonAllocationUUIDTaken: "TestIronicAllocationUUID (a uuid in use, through /v1)",
	// Only /v1 has microversions.
	apierror.ReasonMicroversionNotSupported: "TestIronicRefusalsSpeakToIronicClients (a version not served, a field of a later one)",
	// A condition's reason: a held node deleted, enrolled again and claimed by another.
	apierror.ReasonNodeLost: "TestAReservationWhoseNodeWasTakenEnds (Placed and the host's Eligible)",
	// A node's agent that reports no SSH address takes a node of its own.
	apierror.ReasonSSHAddressUnknown: "TestAHostWithoutAnSSHAddressGivesNoCertificate (a certificate, and the host's Connected message)",
	// A full store is a server of its own, with a small etcd quota.
	apierror.ReasonStorageFull: "TestAFullStoreRefusesWritesAsStorageFullAndTakesThemAgain (a 32 MiB embedded etcd)",
	// An object written into etcd past the API that does not decode.
	metav1.StatusReasonStoreReadError: "TestAnErrorKeepsItsReasonWhateverItsMediaType (a pool that is a JSON string in etcd)",
}

func TestErrorRegistryHasDocsForEveryReason(t *testing.T) {
	s := testserver.StartTestServer(t)
	for _, r := range apierror.All() {
		if r.Code < 400 || r.Code > 599 || http.StatusText(r.Code) == "" {
			t.Errorf("%s: HTTP code %d is not an error code", r.Name, r.Code)
		}
		if r.Summary == "" || r.Fix(apierror.Request{}) == "" {
			t.Errorf("%s: no summary or fix", r.Name)
		}
		// Served without credentials: the docs link must work for a caller who got a 401.
		page := do(t, anonymous(s), "GET", "/docs/errors/"+string(r.Name), "", nil)
		if page.code != http.StatusOK || !bytes.HasPrefix(page.body, []byte("# "+string(r.Name)+"\n")) {
			t.Errorf("%s: docs page answered %d: %.80s", r.Name, page.code, page.body)
		}
		if !bytes.Contains(page.body, []byte(fmt.Sprintf("HTTP %d", r.Code))) {
			t.Errorf("%s: docs page does not state HTTP %d", r.Name, r.Code)
		}
	}
	if got := do(t, anonymous(s), "GET", "/docs/errors/NoSuchReason", "", nil); got.code != http.StatusNotFound {
		t.Errorf("unknown reason page: %d", got.code)
	}
	// And no page of a reason that is gone: the server would not serve it.
	pages, err := fs.ReadDir(docs.ErrorPages, "errors")
	if err != nil || len(pages) == 0 {
		t.Fatalf("the error pages: %v", err)
	}
	for _, page := range pages {
		if reason := metav1.StatusReason(strings.TrimSuffix(page.Name(), ".md")); !apierror.IsRegistered(reason) {
			t.Errorf("docs/errors/%s is the page of no registered reason", page.Name())
		}
	}
}

func TestEveryReasonIsReachable(t *testing.T) {
	s := testserver.StartTestServer(t)
	c, ctx := s.Client.NodusV1(), ctx(t)
	f := newFleet(t, s)
	pool, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReservedHosts("acme").Create(ctx, reservedHost("acme", "r1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victor := f.viewer
	now := time.Now()
	f.host(t, "active", now.Add(-time.Hour), now.Add(time.Hour))
	f.host(t, "released", now.Add(-time.Hour), now.Add(time.Hour))
	if r := f.release(t, f.admin, "released", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	f.node(t, "future")
	f.reserve(t, "future", nodusv1.ReservationPlacement{Node: "future"}, now.Add(time.Hour), now.Add(2*time.Hour))
	f.waitHost(t, "future", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStatePending
	})
	f.host(t, "over", now.Add(-time.Hour), time.Now().Add(2*time.Second))
	f.waitHost(t, "over", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateEnding
	})
	if r := f.release(t, f.admin, "active", `{"agreed":true,"epoch":9}`, "", "Idempotency-Key", "used-once"); r.code != 409 {
		t.Fatalf("stale release: %d %s", r.code, r.body)
	}
	// A reservation on a backfilled allocation, whose deletion must be refused.
	f.node(t, "allocated")
	if _, err := c.Allocations().Create(ctx, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "in-use"},
		Spec: nodusv1.AllocationSpec{Node: "allocated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx, 30*time.Second, func(cx context.Context) (bool, error) {
		a, err := c.Allocations().Get(cx, "in-use", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive, nil
	}); err != nil {
		t.Fatal("the backfill allocation never became active")
	}
	f.reserve(t, "allocated", nodusv1.ReservationPlacement{Allocation: "in-use"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "allocated", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	waiting := waitingReservations(t, f, now)
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	inFlight := "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/active/release-capacity"
	if _, err := idempotencyStore(etcd).Begin(ctx, scopeKey("alice", "POST", inFlight, "running"), fingerprint("", agreed)); err != nil {
		t.Fatal(err)
	}
	stale := pool.DeepCopy()
	pool.Spec.Supplier = "changed"
	if _, err := c.Pools().Update(ctx, pool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	staleBody, _ := json.Marshal(stale)
	// A finished execution, and one placed on an enrolled agent's host that is not lent.
	finished, reporter := executionFixtures(t, s)
	ghost, _ := json.Marshal(reservedHost("ghost", "r1"))

	const pools = "/apis/nodus.dev/v1/pools"
	cases := map[metav1.StatusReason]func() response{
		metav1.StatusReasonBadRequest: func() response {
			return do(t, s.Config, "POST", pools, "application/json", strings.NewReader(`{"kind":`))
		},
		metav1.StatusReasonUnauthorized: func() response { return do(t, bearer(s, "nobody.secret"), "GET", pools, "", nil) },
		metav1.StatusReasonForbidden: func() response {
			return do(t, victor, "DELETE", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/r1", "", nil)
		},
		metav1.StatusReasonNotFound: func() response { return do(t, s.Config, "GET", pools+"/missing", "", nil) },
		metav1.StatusReasonMethodNotAllowed: func() response {
			return do(t, s.Config, "POST", "/api/v1/namespaces", "application/json", strings.NewReader(`{"metadata":{"name":"x"}}`))
		},
		metav1.StatusReasonNotAcceptable: func() response {
			return do(t, s.Config, "GET", pools, "", nil, "Accept", "application/xml")
		},
		metav1.StatusReasonAlreadyExists: func() response {
			return do(t, s.Config, "POST", pools, "application/json", strings.NewReader(`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"fra1"}}`))
		},
		metav1.StatusReasonConflict: func() response {
			return do(t, s.Config, "PUT", pools+"/fra2", "application/json", bytes.NewReader(staleBody))
		},
		metav1.StatusReasonRequestEntityTooLarge: func() response {
			huge := `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"big"},"spec":{"supplier":"` + strings.Repeat("x", 4<<20) + `"}}`
			return do(t, s.Config, "POST", pools, "application/json", strings.NewReader(huge))
		},
		metav1.StatusReasonUnsupportedMediaType: func() response {
			return do(t, s.Config, "POST", pools, "text/plain", strings.NewReader("pool"))
		},
		apierror.ReasonRequestURITooLong: func() response {
			return do(t, s.Config, "GET", pools+"?labelSelector=x&pad="+strings.Repeat("x", 32<<10), "", nil)
		},
		metav1.StatusReasonInvalid: func() response {
			return do(t, s.Config, "POST", pools, "application/json", strings.NewReader(`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"Not_A_Name"}}`))
		},
		metav1.StatusReasonTimeout:          func() response { return do(t, s.Config, "GET", pools+"?timeout=1ns", "", nil) },
		apierror.ReasonReleaseNotAgreed:     func() response { return f.release(t, f.admin, "active", `{"agreed":false,"epoch":1}`, "") },
		apierror.ReasonEpochRequired:        func() response { return f.release(t, f.admin, "active", `{"agreed":true}`, "") },
		apierror.ReasonEpochConflict:        func() response { return f.release(t, f.admin, "active", `{"agreed":true,"epoch":9}`, "") },
		apierror.ReasonAlreadyReleased:      func() response { return f.release(t, f.admin, "released", `{"agreed":true,"epoch":2}`, "") },
		apierror.ReasonTermEnded:            func() response { return f.release(t, f.admin, "over", `{"agreed":true,"epoch":2}`, "") },
		apierror.ReasonReservationNotActive: func() response { return f.release(t, f.admin, "future", `{"agreed":true,"epoch":0}`, "") },
		apierror.ReasonPreconditionFailed: func() response {
			return f.release(t, f.admin, "active", agreed, "", "If-Match", `"0"`)
		},
		apierror.ReasonIdempotencyKeyInvalid: func() response {
			return f.release(t, f.admin, "active", agreed, "", "Idempotency-Key", "two words")
		},
		apierror.ReasonIdempotencyKeyReused: func() response {
			return f.release(t, f.admin, "active", agreed, "", "Idempotency-Key", "used-once")
		},
		apierror.ReasonIdempotencyKeyInFlight: func() response {
			return f.release(t, f.admin, "active", agreed, "", "Idempotency-Key", "running")
		},
		apierror.ReasonNodeActive: func() response {
			return do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/allocations/in-use", "", nil)
		},
		// Allocation in-use has the Ironic name in-use (its object name).
		apierror.ReasonAllocationNameTaken: func() response {
			return do(t, s.Config, "POST", "/apis/nodus.dev/v1/allocations", "application/json", strings.NewReader(
				`{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"name":"second"},"spec":{"ironicName":"in-use","resourceClass":"gpu-h100x8"}}`))
		},
		apierror.ReasonBorrowingNotAllowed: func() response {
			return do(t, s.Config, "POST", "/apis/nodus.dev/v1/namespaces/acme/executions", "application/json", strings.NewReader(
				`{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"e"},"spec":{"pool":"fra1","command":["true"],"maxRuntimeSeconds":60}}`))
		},
		apierror.ReasonLendingClosed: func() response {
			return do(t, f.admin, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/active/lend", "application/json", strings.NewReader(`{"epoch":1}`))
		},
		apierror.ReasonExecutionFinished: func() response {
			return do(t, s.Config, "POST", "/apis/nodus.dev/v1/namespaces/acme/executions/"+finished+"/cancel", "application/json", strings.NewReader(`{}`))
		},
		apierror.ReasonExecutionActive: func() response {
			return do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/namespaces/acme/executions/"+reporter.execution, "", nil)
		},
		apierror.ReasonHostNotLent: func() response {
			return do(t, reporter.agent, "POST", "/apis/nodus.dev/v1/namespaces/acme/executions/"+reporter.execution+"/report",
				"application/json", strings.NewReader(`{"phase":"running"}`))
		},
		apierror.ReasonStaleAgent: func() response {
			return f.heartbeat(t, "active", nodusv1.NodeHeartbeat{AgentGeneration: 0})
		},
		apierror.ReasonProjectNotFound: func() response {
			return do(t, s.Config, "POST", "/apis/nodus.dev/v1/namespaces/ghost/reservedhosts", "application/json", bytes.NewReader(ghost))
		},
	}
	enrollWith := func(spec nodusv1.EnrollmentTokenSpec, node string) response {
		tok := issueToken(t, s, "", spec)
		return do(t, bearer(s, tok.Status.Token), "POST", "/apis/nodus.dev/v1/nodes/"+node+"/enroll", "application/json",
			strings.NewReader(fmt.Sprintf(`{"certificateRequest":%q}`, certificateRequest(t))))
	}
	cases[apierror.ReasonEnrollmentTokenNodeMismatch] = func() response {
		return enrollWith(nodusv1.EnrollmentTokenSpec{Pool: "lends-to-acme", ResourceClass: "gpu-h100x8", NodeName: "another"}, "reporter")
	}
	cases[apierror.ReasonNodeAlreadyEnrolled] = func() response {
		return enrollWith(nodusv1.EnrollmentTokenSpec{Pool: "lends-to-acme", ResourceClass: "gpu-h100x8"}, "reporter")
	}
	cases[apierror.ReasonEnrollmentTokenPoolMismatch] = func() response {
		return enrollWith(nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "reporter"}, "reporter")
	}
	cases[apierror.ReasonEnrollmentTokenUsed] = func() response {
		tok := issueToken(t, s, "", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"})
		enroll := func() response { // a new key each time
			return do(t, bearer(s, tok.Status.Token), "POST", "/apis/nodus.dev/v1/nodes/enrolled-once/enroll", "application/json",
				strings.NewReader(fmt.Sprintf(`{"certificateRequest":%q}`, certificateRequest(t))))
		}
		if r := enroll(); r.code >= 300 {
			t.Fatalf("the first enrollment: %d %s", r.code, r.body)
		}
		return enroll()
	}
	cases[apierror.ReasonServerOwnedField] = func() response {
		return do(t, reporter.agent, "PATCH", "/apis/nodus.dev/v1/nodes/reporter/status", "application/merge-patch+json",
			strings.NewReader(`{"status":{"provisionState":"available","appliedEpoch":42}}`))
	}
	cases[apierror.ReasonAgentCredentialRetired] = func() response {
		spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "replaced"}
		old := enrollAgent(t, s, "replaced", spec, t.TempDir())
		enrollAgent(t, s, "replaced", spec, t.TempDir())
		waitCode(t, old, "/apis/nodus.dev/v1/nodes/replaced", http.StatusForbidden)
		return do(t, old, "GET", "/apis/nodus.dev/v1/nodes/replaced", "", nil)
	}
	cases[apierror.ReasonProjectHasReservations] = func() response {
		return do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/projects/acme", "", nil)
	}
	cases[apierror.ReasonNodeOwesCleaning] = func() response {
		return do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/nodes/handed-over", "", nil)
	}
	cases[apierror.ReasonNodeInUse] = func() response {
		return do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/nodes/active", "application/merge-patch+json", strings.NewReader(`{"spec":{"resourceClass":"gpu-spare"}}`))
	}
	cases[apierror.ReasonNodeReserved] = func() response {
		body, _ := json.Marshal(&nodusv1.Reservation{TypeMeta: metav1.TypeMeta{APIVersion: "nodus.dev/v1", Kind: "Reservation"},
			ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: nodusv1.ReservationSpec{Project: "acme",
				Placement: nodusv1.ReservationPlacement{Node: "active"}, StartsAt: metav1.NewTime(now.Truncate(time.Second)),
				EndsAt: metav1.NewTime(now.Add(time.Hour).Truncate(time.Second))}})
		return do(t, s.Config, "POST", "/apis/nodus.dev/v1/reservations", "application/json", bytes.NewReader(body))
	}
	for _, r := range apierror.All() {
		if reservation, ok := waiting[r.Name]; ok {
			// Reached as the reason a reservation waits (also the error of a create, above).
			if got := placedReason(t, f, reservation, r.Name); got != string(r.Name) {
				t.Errorf("reservation %s waits with Placed reason %q, want %s", reservation, got, r.Name)
			}
			if _, isError := cases[r.Name]; !isError {
				continue
			}
		}
		provoke, ok := cases[r.Name]
		if !ok {
			if _, elsewhere := provokedElsewhere[r.Name]; elsewhere {
				continue
			}
			if why, listed := unreachable[r.Name]; !listed || why == "" {
				t.Errorf("%s is registered but neither provoked nor listed as unreachable", r.Name)
			}
			continue
		}
		resp := provoke()
		if resp.code != r.Code {
			t.Errorf("%s: got HTTP %d, want %d: %s", r.Name, resp.code, r.Code, resp.body)
			continue
		}
		if env := envelopeOf(t, resp); env.Reason != r.Name {
			t.Errorf("provoking %s gave reason %s: %s", r.Name, env.Reason, resp.body)
		}
	}
}

// waitingReservations makes a reservation that waits for each reason a
// node cannot be claimed, and names it by reason.
func waitingReservations(t *testing.T, f *fleet, now time.Time) map[metav1.StatusReason]string {
	t.Helper()
	c, ctx := f.s.Client.NodusV1(), ctx(t)
	term := func(name, node string) {
		f.reserve(t, name, nodusv1.ReservationPlacement{Node: node}, now.Add(-time.Hour), now.Add(time.Hour))
	}
	// A node whose holder is released and drained is cleaning; nothing reports its cleaning.
	f.host(t, "handed-over", now.Add(-time.Hour), now.Add(time.Hour))
	if r := f.release(t, f.admin, "handed-over", `{"agreed":true,"epoch":1}`, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	if r := f.heartbeat(t, "handed-over", nodusv1.NodeHeartbeat{AgentGeneration: 1,
		Reservations: []nodusv1.ReservationEvidence{evidence("handed-over", 2, 0, 0)}}); r.code != 201 && r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	f.node(t, "fixing")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Nodes().Get(ctx, "fixing", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Maintenance, n.Spec.MaintenanceReason = true, "replacing a fan"
		_, err = c.Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// An Ironic client's backfill holds a node.
	f.node(t, "backfilled")
	backfill(t, f.s, "ironic-backfill", "backfilled")
	term("wants-missing", "missing")
	term("wants-fixing", "fixing")
	term("wants-cleaning", "handed-over")
	term("wants-allocated", "backfilled")
	// A node that names no login user, for a reservation that names none.
	if _, err := testfleet.Node(ctx, f.s.Client, "nameless", "fra1", "gpu-h100x8", ""); err != nil {
		t.Fatal(err)
	}
	term("wants-login-user", "nameless")
	// A class no node has: its allocation is never placed.
	f.reserve(t, "wants-a-node", nodusv1.ReservationPlacement{ResourceClass: "gpu-none"}, now.Add(-time.Hour), now.Add(time.Hour))
	return map[metav1.StatusReason]string{
		apierror.ReasonNodeNotFound: "wants-missing", apierror.ReasonNodeInMaintenance: "wants-fixing",
		apierror.ReasonNodeCleaning: "wants-cleaning", apierror.ReasonNodeAllocated: "wants-allocated",
		apierror.ReasonLoginUserUnknown: "wants-login-user", apierror.ReasonAwaitingNode: "wants-a-node",
	}
}

// placedReason waits until reservation's Placed condition has reason want,
// and returns the last reason seen.
func placedReason(t *testing.T, f *fleet, reservation string, want metav1.StatusReason) string {
	t.Helper()
	last := ""
	_ = testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := f.s.Client.NodusV1().Reservations().Get(cx, reservation, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if c := meta.FindStatusCondition(r.Status.Conditions, "Placed"); c != nil {
			last = c.Reason
		}
		return last == string(want) && r.Status.State == nodusv1.ReservationStatePending, nil
	})
	return last
}

// placedExecution is an execution placed on an enrolled agent's host.
type placedExecution struct {
	agent     *rest.Config
	execution string
}

// executionFixtures makes, in acme, an execution that succeeded and one
// running on the host of a freshly enrolled agent that nobody lends.
func executionFixtures(t *testing.T, s *testserver.Server) (string, placedExecution) {
	t.Helper()
	c := s.Client.NodusV1()
	if _, err := c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lends-to-acme"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reporter := enrollAgent(t, s, "reporter", nodusv1.EnrollmentTokenSpec{Pool: "lends-to-acme", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	node, err := c.Nodes().Get(ctx(t), "reporter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placed := func(phase nodusv1.ExecutionPhase, host string) string {
		e, err := c.Executions("acme").Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{GenerateName: "fixture-"},
			Spec: nodusv1.ExecutionSpec{Pool: "lends-to-acme", Command: []string{"true"}, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The operator plays the scheduler (the pool has no lent host), whose
		// "Waiting" note on the new execution may come first.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current, err := c.Executions("acme").Get(ctx(t), e.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			current.Status.Phase, current.Status.Host = phase, host
			_, err = c.Executions("acme").UpdateStatus(ctx(t), current, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return e.Name
	}
	return placed(nodusv1.ExecutionSucceeded, ""), placedExecution{agent: reporter, execution: placed(nodusv1.ExecutionRunning, lending.HostAlias(node))}
}

// certificateRequest is a PEM certificate request for a fresh key.
func certificateRequest(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// TestAnErrorKeepsItsReasonWhateverItsMediaType: the envelope read the
// library's Status as JSON or protobuf only. Asked for YAML, the Status
// came as YAML, and its reason was rebuilt from the code alone (409
// AlreadyExists became Conflict) and its causes lost. And the library's
// StorageReadError, an object in etcd that cannot be read, became an
// InternalError with no word of which key.
func TestAnErrorKeepsItsReasonWhateverItsMediaType(t *testing.T) {
	s := testserver.StartTestServer(t)
	const pools = "/apis/nodus.dev/v1/pools"
	pool := `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"fra2"}}`
	if r := do(t, s.Config, "POST", pools, "application/json", strings.NewReader(pool)); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	yamlAccept := []string{"Accept", "application/yaml"}
	expectReason(t, do(t, s.Config, "POST", pools, "application/json", strings.NewReader(pool), yamlAccept...), http.StatusConflict, metav1.StatusReasonAlreadyExists)
	invalid := expectReason(t, do(t, s.Config, "POST", pools, "application/json",
		strings.NewReader(`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"Not_A_Name"}}`), yamlAccept...), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)
	if invalid.Details == nil || len(invalid.Details.Causes) == 0 {
		t.Errorf("a 422 asked for in YAML lost its causes: %+v", invalid.Status)
	}

	putInEtcd(t, s, "/registry/nodus.dev/pools/broken", "not a pool")
	// A list read from etcd names the key; so does a read of the object
	// (the library's InternalError, in its message).
	unreadable := expectReason(t, do(t, s.Config, "GET", pools, "", nil), http.StatusInternalServerError, metav1.StatusReasonStoreReadError)
	if unreadable.Details == nil || len(unreadable.Details.Causes) == 0 || !strings.Contains(unreadable.Details.Causes[0].Field, "/registry/nodus.dev/pools/broken") {
		t.Errorf("a list with an unreadable object does not name its key: %+v", unreadable.Status)
	}
	if r := do(t, s.Config, "GET", pools+"/broken", "", nil); r.code != http.StatusInternalServerError || !strings.Contains(string(r.body), "pools/broken") {
		t.Errorf("a read of an unreadable object: %d %.300s", r.code, r.body)
	}
	// What its page says to do: an operator deletes it without reading it.
	if r := do(t, s.Config, "DELETE", pools+"/broken", "application/json",
		strings.NewReader(`{"kind":"DeleteOptions","apiVersion":"v1","ignoreStoreReadErrorWithClusterBreakingPotential":true}`)); r.code != http.StatusOK {
		t.Errorf("the unsafe delete of an unreadable object: %d %s", r.code, r.body)
	}
	if r := do(t, s.Config, "GET", pools+"/broken", "", nil); r.code != http.StatusNotFound {
		t.Errorf("the unreadable object after its delete: %d %s", r.code, r.body)
	}
}
