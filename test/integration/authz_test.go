package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// kindUnderTest is one resource of the matrix: where it lives and an object of it.
type kindUnderTest struct {
	name       string // as printed, e.g. reservedhosts/status
	collection string // URL path of the collection
	object     string // name of the existing object
	newObject  func() interface{}
	// readOnly resources serve no writes at all (405 for those allowed to try).
	readOnly bool
	// statusOnly: only get, update and patch are served.
	statusOnly bool
	// action is the body of an action subresource, which serves only create (POST).
	action string
}

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// TestAuthorizationMatrix checks every role against every verb on every kind.
// Writes are sent with dryRun=All, so the matrix changes nothing.
func TestAuthorizationMatrix(t *testing.T) {
	s := testserver.StartTestServer(t)
	seedMatrix(t, s)
	// The reservation controller projects r1; wait until it settles so that
	// the matrix's updates do not race it.
	(&fleet{s: s}).waitHost(t, "r1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		n, err := s.Client.NodusV1().Nodes().Get(c, "gpu-001", metav1.GetOptions{})
		return err == nil && n.Status.ProvisionState == nodusv1.ProvisionStateActive, nil
	}); err != nil {
		t.Fatal("the reserved node never became active")
	}
	// r1 is lent, so that its HostLending exists; e1 waits for a ready host.
	// A lend shares out the memory and CPUs the host's agent reported.
	// The matrix asks who may delete gpu-001, not whether its tenant's
	// cleaning is owed (TestANodeThatOwesACleaningIsNotDeleted): the
	// operator's annotation lets its (dry-run) deletion through.
	forgeNodeInEtcd(t, s, "gpu-001", func(n *nodusv1.Node) {
		n.Status.Inventory.CPU, n.Status.Inventory.MemoryMiB = 224, 2<<20
		n.Annotations = map[string]string{nodusv1.AnnotationDeleteUncleaned: "true"}
	})
	if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/r1/lend", "application/json", strings.NewReader(`{"epoch":1}`)); r.code != 200 {
		t.Fatalf("lend r1: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		e, err := s.Client.NodusV1().Executions("acme").Get(c, "e1", metav1.GetOptions{})
		return err == nil && e.Status.Reason == "Waiting", nil
	}); err != nil {
		t.Fatal("the execution never settled as waiting")
	}

	const nodus = "/apis/nodus.dev/v1"
	kinds := []kindUnderTest{
		{name: "projects", collection: nodus + "/projects", object: "acme", newObject: func() interface{} { return project("new-project") }},
		{name: "pools", collection: nodus + "/pools", object: "fra1", newObject: func() interface{} {
			return &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "new-pool"}}
		}},
		{name: "nodes", collection: nodus + "/nodes", object: "gpu-001", newObject: func() interface{} { return node("new-node") }},
		{name: "allocations", collection: nodus + "/allocations", object: "a1", newObject: func() interface{} { return allocation("new-alloc") }},
		{name: "reservations", collection: nodus + "/reservations", object: "r1", newObject: func() interface{} {
			r := reservation("new-rsv")
			r.Spec.Placement.Node = "gpu-new" // gpu-001 is r1's
			return r
		}},
		{name: "accesstokens", collection: nodus + "/accesstokens", object: "tok1", newObject: func() interface{} {
			return &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "new-token"}, Spec: nodusv1.AccessTokenSpec{User: "x"}}
		}},
		{name: "reservedhosts", collection: nodus + "/namespaces/acme/reservedhosts", object: "r1", newObject: func() interface{} { return reservedHost("acme", "new-host") }},
		{name: "reservedhosts/status", collection: nodus + "/namespaces/acme/reservedhosts", object: "r1", statusOnly: true},
		{name: "reservedhosts/release-capacity", collection: nodus + "/namespaces/acme/reservedhosts", object: "r1", action: `{"agreed":true,"epoch":1}`},
		{name: "nodes/heartbeat", collection: nodus + "/nodes", object: "gpu-001", action: `{"agentGeneration":0}`},
		{name: "reservedhosts/lend", collection: nodus + "/namespaces/acme/reservedhosts", object: "r1", action: `{"epoch":1}`},
		{name: "reservedhosts/withdraw", collection: nodus + "/namespaces/acme/reservedhosts", object: "r1", action: `{"epoch":1}`},
		{name: "hostlendings", collection: nodus + "/namespaces/acme/hostlendings", object: "r1", newObject: func() interface{} {
			return &nodusv1.HostLending{ObjectMeta: metav1.ObjectMeta{Name: "new-lending", Namespace: "acme"},
				Status: nodusv1.HostLendingStatus{State: nodusv1.HostLendingWithdrawn}}
		}},
		{name: "hostlendings/status", collection: nodus + "/namespaces/acme/hostlendings", object: "r1", statusOnly: true},
		{name: "executions", collection: nodus + "/namespaces/acme/executions", object: "e1", newObject: func() interface{} { return execution("new-exec") }},
		{name: "executions/status", collection: nodus + "/namespaces/acme/executions", object: "e1", statusOnly: true},
		{name: "executions/cancel", collection: nodus + "/namespaces/acme/executions", object: "e1", action: `{}`},
		{name: "executions/report", collection: nodus + "/namespaces/acme/executions", object: "e1", action: `{"phase":"running"}`},
		{name: "namespaces", collection: "/api/v1/namespaces", object: "acme", readOnly: true, newObject: func() interface{} {
			return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "new-ns"}}
		}},
	}

	roles := map[string]*rest.Config{
		"operator":  s.Config,
		"admin":     tokenFor(t, s, "alice"),
		"member":    tokenFor(t, s, "mary"),
		"viewer":    tokenFor(t, s, "victor", "acme-viewers"),
		"outsider":  tokenFor(t, s, "oscar"),
		"anonymous": anonymous(s),
	}

	for role, cfg := range roles {
		for _, k := range kinds {
			for _, verb := range verbs {
				want := expectedCode(role, k, verb)
				if want == 0 {
					continue // not served at all: no route to authorize
				}
				got := send(t, s, cfg, k, verb)
				if got != want {
					t.Errorf("%-9s %-6s %-20s: got %d, want %d", role, verb, k.name, got, want)
				}
			}
		}
	}

	t.Run("namespaces are filtered to the caller's projects", func(t *testing.T) {
		for role, want := range map[string]string{"operator": "acme,other", "viewer": "acme", "outsider": "other"} {
			r := do(t, roles[role], "GET", "/api/v1/namespaces", "", nil)
			var list corev1.NamespaceList
			if err := json.Unmarshal(r.body, &list); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ns := range list.Items {
				names = append(names, ns.Name)
			}
			if got := strings.Join(names, ","); got != want {
				t.Errorf("%s sees namespaces %q, want %q", role, got, want)
			}
		}
	})

	t.Run("a node agent writes its own facts, field by field", func(t *testing.T) {
		agentCfg := enrollAgent(t, s, "matrix-agent", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}, t.TempDir())
		own := nodus + "/nodes/matrix-agent"
		rows := []struct {
			what, method, path, body string
			want                     int
			reason                   metav1.StatusReason
		}{
			{"status.inventory", "PATCH", own + "/status", `{"status":{"inventory":{"cpu":8,"memoryMiB":1024,"diskGiB":10}}}`, 200, ""},
			{"status.sshHostKey", "PATCH", own + "/status", `{"status":{"sshHostKey":"` + testfleet.HostKey("matrix-agent") + `"}}`, 200, ""},
			{"status.sshAddress", "PATCH", own + "/status", `{"status":{"sshAddress":"10.0.0.9:22"}}`, 200, ""},
			{"status.executionSlots", "PATCH", own + "/status", `{"status":{"executionSlots":4}}`, 200, ""},
			{"status.provisionState", "PATCH", own + "/status", `{"status":{"provisionState":"available"}}`, 403, apierror.ReasonServerOwnedField},
			{"status.allocation", "PATCH", own + "/status", `{"status":{"allocation":"a1"}}`, 403, apierror.ReasonServerOwnedField},
			{"status.reservation", "PATCH", own + "/status", `{"status":{"reservation":"r1"}}`, 403, apierror.ReasonServerOwnedField},
			{"status.cleaning", "PATCH", own + "/status", `{"status":{"cleaning":{"request":1,"phase":"Succeeded","requestedAt":"2026-01-01T00:00:00Z"}}}`, 403, apierror.ReasonServerOwnedField},
			{"status.conditions", "PATCH", own + "/status", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Forged","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, 403, apierror.ReasonServerOwnedField},
			{"status.appliedEpoch", "PATCH", own + "/status", `{"status":{"appliedEpoch":7}}`, 403, apierror.ReasonServerOwnedField},
			{"status.agentGeneration", "PATCH", own + "/status", `{"status":{"agentGeneration":9}}`, 403, apierror.ReasonServerOwnedField},
			{"status.lastHeartbeatTime", "PATCH", own + "/status", `{"status":{"lastHeartbeatTime":"2030-01-01T00:00:00Z"}}`, 403, apierror.ReasonServerOwnedField},
			// A refusal comes with a heartbeat, about a reservation on the node.
			{"status.accessRefusal", "PATCH", own + "/status", `{"status":{"accessRefusal":{"reservation":"r1","epoch":1,"message":"forged"}}}`, 403, apierror.ReasonServerOwnedField},
			// A finalizer would keep a deleted node, and its credentials, alive.
			{"metadata.finalizers", "PATCH", own + "/status", `{"metadata":{"finalizers":["x.io/keep"]}}`, 403, apierror.ReasonServerOwnedField},
			{"metadata.labels", "PATCH", own + "/status", `{"metadata":{"labels":{"pool":"other"}}}`, 403, apierror.ReasonServerOwnedField},
			{"metadata.annotations", "PATCH", own + "/status", `{"metadata":{"annotations":{"x":"y"}}}`, 403, apierror.ReasonServerOwnedField},
			{"metadata.ownerReferences", "PATCH", own + "/status", `{"metadata":{"ownerReferences":[{"apiVersion":"nodus.dev/v1","kind":"Pool","name":"fra1","uid":"6f7e6e07-c93b-476f-8085-f75ee2b49306"}]}}`, 403, apierror.ReasonServerOwnedField},
			{"its own spec", "PATCH", own, `{"spec":{"pool":"elsewhere"}}`, 403, metav1.StatusReasonForbidden},
			{"its own node, deleted", "DELETE", own, "", 403, metav1.StatusReasonForbidden},
			{"another node's status", "PATCH", nodus + "/nodes/gpu-001/status", `{"status":{"sshAddress":"10.0.0.9:22"}}`, 403, metav1.StatusReasonForbidden},
			{"another node's heartbeat", "POST", nodus + "/nodes/gpu-001/heartbeat", `{"agentGeneration":1}`, 403, metav1.StatusReasonForbidden},
			{"another node's renewal", "POST", nodus + "/nodes/gpu-001/renew", `{"certificateRequest":""}`, 403, metav1.StatusReasonForbidden},
			{"its own renewal", "POST", own + "/renew", fmt.Sprintf(`{"certificateRequest":%q}`, certificateRequest(t)), 200, ""},
			{"its own heartbeat", "POST", own + "/heartbeat", `{"agentGeneration":1}`, 200, ""},
			{"a reservation", "POST", nodus + "/reservations", `{}`, 403, metav1.StatusReasonForbidden},
			{"an execution's status", "PATCH", nodus + "/namespaces/acme/executions/e1/status", `{"status":{"phase":"Succeeded"}}`, 403, metav1.StatusReasonForbidden},
		}
		for _, row := range rows {
			ctype := "application/json"
			if row.method == "PATCH" {
				ctype = "application/merge-patch+json"
			}
			r := do(t, agentCfg, row.method, row.path+"?dryRun=All", ctype, strings.NewReader(row.body))
			if r.code != row.want {
				t.Errorf("agent %s %s: %d, want %d: %s", row.method, row.what, r.code, row.want, r.body)
				continue
			}
			if row.reason != "" {
				if env := envelopeOf(t, r); env.Reason != row.reason {
					t.Errorf("agent %s %s: reason %s, want %s", row.method, row.what, env.Reason, row.reason)
				}
			}
		}
	})

	t.Run("denials carry no object data", func(t *testing.T) {
		r := do(t, roles["outsider"], "GET", nodus+"/namespaces/acme/reservedhosts/r1", "", nil)
		if r.code != http.StatusForbidden || bytes.Contains(r.body, []byte("h100")) {
			t.Errorf("outsider read of another project's host: %d %s", r.code, r.body)
		}
		envelopeOf(t, r)
	})
}

// expectedCode is the rule the matrix checks; 0 means the verb is not served.
func expectedCode(role string, k kindUnderTest, verb string) int {
	if k.statusOnly && verb != "get" && verb != "update" && verb != "patch" {
		return 0
	}
	if k.action != "" && verb != "create" {
		return 0
	}
	if role == "anonymous" {
		return http.StatusUnauthorized
	}
	if k.name == "executions/report" {
		return http.StatusForbidden // the host's agent only, not even operators
	}
	write := verb != "get" && verb != "list" && verb != "watch"
	if role == "operator" {
		if k.readOnly && write {
			return http.StatusMethodNotAllowed
		}
		if k.name == "projects" && verb == "delete" {
			return http.StatusConflict // allowed, but acme holds r1: ProjectHasReservations
		}
		return success(k, verb)
	}
	allowed := false
	switch k.name {
	case "reservedhosts", "reservedhosts/status", "hostlendings", "hostlendings/status", "executions/status":
		allowed = !write && role != "outsider"
	case "executions":
		allowed = role != "outsider" && (!write || ((verb == "create" || verb == "delete") && role != "viewer"))
	case "namespaces":
		allowed = verb == "list" || verb == "watch" || (verb == "get" && role != "outsider")
	case "projects":
		allowed = verb == "get" && role != "outsider"
	case "reservedhosts/release-capacity", "reservedhosts/lend", "reservedhosts/withdraw":
		if role == "admin" {
			return http.StatusOK
		}
	case "executions/cancel":
		if role == "admin" || role == "member" {
			return http.StatusOK
		}
	}
	if allowed {
		return success(k, verb)
	}
	return http.StatusForbidden
}

func success(k kindUnderTest, verb string) int {
	if k.action != "" {
		return http.StatusOK // actions create nothing
	}
	if verb == "create" {
		return http.StatusCreated
	}
	return http.StatusOK
}

// send performs verb on k with cfg's credentials and returns the status code.
// Writes are dry runs; watches return as soon as the stream starts.
func send(t *testing.T, s *testserver.Server, cfg *rest.Config, k kindUnderTest, verb string) int {
	t.Helper()
	item := k.collection + "/" + k.object
	if k.statusOnly {
		item += "/status"
	}
	if k.action != "" {
		sub := k.name[strings.Index(k.name, "/")+1:]
		return do(t, cfg, "POST", item+"/"+sub+"?dryRun=All", "application/json", strings.NewReader(k.action)).code
	}
	var method, path, ctype string
	var body []byte
	switch verb {
	case "get":
		method, path = "GET", item
	case "list":
		method, path = "GET", k.collection
	case "watch":
		return watchCode(t, cfg, k.collection+"?watch=1")
	case "create":
		method, path, ctype = "POST", k.collection+"?dryRun=All", "application/json"
		body, _ = json.Marshal(k.newObject())
	case "update":
		// Send back what the operator reads, so only authorization can fail.
		current := do(t, s.Config, "GET", item, "", nil)
		method, path, ctype, body = "PUT", item+"?dryRun=All", "application/json", current.body
	case "patch":
		method, path, ctype, body = "PATCH", item+"?dryRun=All", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"touched":"yes"}}}`)
	case "delete":
		method, path = "DELETE", item+"?dryRun=All"
	}
	return do(t, cfg, method, path, ctype, bytes.NewReader(body)).code
}

func watchCode(t *testing.T, cfg *rest.Config, path string) int {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx(t), "GET", cfg.Host+path, nil)
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func seedMatrix(t *testing.T, s *testserver.Server) {
	t.Helper()
	c, ctx := s.Client.NodusV1(), ctx(t)
	must := func(_ interface{}, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Projects().Create(ctx, project("acme",
		nodusv1.ProjectMember{Name: "alice", Role: nodusv1.ProjectRoleAdmin},
		nodusv1.ProjectMember{Name: "mary", Role: nodusv1.ProjectRoleMember},
		nodusv1.ProjectMember{Kind: nodusv1.MemberKindGroup, Name: "acme-viewers", Role: nodusv1.ProjectRoleViewer}), metav1.CreateOptions{}))
	must(c.Projects().Create(ctx, project("other", nodusv1.ProjectMember{Name: "oscar", Role: nodusv1.ProjectRoleAdmin}), metav1.CreateOptions{}))
	must(c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra1"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}}}}}, metav1.CreateOptions{}))
	must(c.Nodes().Create(ctx, node("gpu-001"), metav1.CreateOptions{}))
	must(c.Executions("acme").Create(ctx, execution("e1"), metav1.CreateOptions{}))
	must(c.Allocations().Create(ctx, allocation("a1"), metav1.CreateOptions{}))
	must(c.Reservations().Create(ctx, reservation("r1"), metav1.CreateOptions{}))
	must(c.AccessTokens().Create(ctx, &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "tok1"}, Spec: nodusv1.AccessTokenSpec{User: "someone"}}, metav1.CreateOptions{}))
}

func execution(name string) *nodusv1.Execution {
	return &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "acme"},
		Spec: nodusv1.ExecutionSpec{Pool: "fra1", Command: []string{"true"}, MaxRuntimeSeconds: 60}}
}

func node(name string) *nodusv1.Node {
	return &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}}
}

func allocation(name string) *nodusv1.Allocation {
	return &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}
}

func reservation(name string) *nodusv1.Reservation {
	return &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.ReservationSpec{
		Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-001"}, StartsAt: termStart, EndsAt: termEnd, LoginUser: "ubuntu"}}
}
