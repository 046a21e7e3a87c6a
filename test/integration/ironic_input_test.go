package integration

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestIronicMaintenanceIsTrueOrFalse: a patch that removed maintenance, or
// set it to null, took the node out of maintenance (null decoded as false)
// and dropped its reason, answering 200. Maintenance is true or false: 400,
// and the node as it was.
func TestIronicMaintenanceIsTrueOrFalse(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "held")
	op := tokenFor(t, s, "ops", "nodus:operators")
	patch := func(body string) response {
		return do(t, op, "PATCH", "/v1/nodes/held", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	if r := patch(`[{"op":"replace","path":"/maintenance","value":true},{"op":"add","path":"/maintenance_reason","value":"rma"}]`); r.code != http.StatusOK {
		t.Fatalf("into maintenance: %d %s", r.code, r.body)
	}
	for _, body := range []string{`[{"op":"remove","path":"/maintenance"}]`, `[{"op":"replace","path":"/maintenance","value":null}]`} {
		if msg := ironicFault(t, patch(body), http.StatusBadRequest); !strings.Contains(msg, "maintenance") {
			t.Errorf("%s: %q", body, msg)
		}
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "held", metav1.GetOptions{}); err != nil || !n.Spec.Maintenance || n.Spec.MaintenanceReason != "rma" {
		t.Errorf("the node after the refused patches: %v %+v", err, n.Spec)
	}
}

// TestIronicRefusalsSpeakToIronicClients: a /v1 refusal's reason, docs and
// fix are an Ironic client's. A microversion the server does not serve, or
// that a field needs, was sent as NotAcceptable, whose page is about the
// Accept header; a 400, 404 or 405 had kubectl's fix (`kubectl explain`,
// `kubectl api-resources`).
func TestIronicRefusalsSpeakToIronicClients(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "n1")
	op := tokenFor(t, s, "ops", "nodus:operators")
	call := func(method, path, version string) response {
		return do(t, op, method, path, "application/json", nil, "X-OpenStack-Ironic-API-Version", version)
	}
	type envelope struct {
		Reason string `json:"reason"`
		Docs   string `json:"docs"`
		Fix    string `json:"fix"`
	}
	read := func(r response) envelope {
		t.Helper()
		var e envelope
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatalf("%d %s: %v", r.code, r.body, err)
		}
		return e
	}
	for what, r := range map[string]response{
		"a version the server does not serve": call("GET", "/v1/nodes", "1.99"),
		"a field of a later version":          call("GET", "/v1/nodes?fields=name,owner", "1.49"),
	} {
		ironicFault(t, r, http.StatusNotAcceptable)
		e := read(r)
		if e.Reason != string(apierror.ReasonMicroversionNotSupported) || !strings.HasSuffix(e.Docs, "/"+e.Reason) ||
			!strings.Contains(e.Fix, "X-OpenStack-Ironic-API-Version") {
			t.Errorf("%s: %s", what, r.body)
		}
	}
	for what, r := range map[string]response{
		"a bad limit (400)":             call("GET", "/v1/nodes?limit=-1", "1.60"),
		"an unknown node (404)":         call("GET", "/v1/nodes/no-such-node", "1.60"),
		"a method the path lacks (405)": call("PUT", "/v1/allocations", "1.60"),
		"an unknown allocation (404)":   call("GET", "/v1/allocations/no-such-allocation", "1.60"),
		"an unknown argument (400)":     call("GET", "/v1/nodes?resouce_class=x", "1.60"),
		"a patch of a read-only (400)":  do(t, op, "PATCH", "/v1/nodes/n1", "application/json", strings.NewReader(`[{"op":"replace","path":"/power_state","value":"on"}]`), "X-OpenStack-Ironic-API-Version", "1.60"),
	} {
		e := read(r)
		if r.code < 400 || e.Fix == "" || strings.Contains(e.Fix, "kubectl") {
			t.Errorf("%s: the fix is not an Ironic client's: %d %s", what, r.code, r.body)
		}
	}
	tooLarge := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"name":"`+strings.Repeat("x", 70<<10)+`"}`), "X-OpenStack-Ironic-API-Version", "1.60")
	if e := read(tooLarge); tooLarge.code != http.StatusRequestEntityTooLarge || !strings.Contains(e.Fix, "64 KiB") || strings.Contains(e.Fix, "MiB") {
		t.Errorf("a body over the bound: %d %s", tooLarge.code, tooLarge.body)
	}
	// A refusal of a reason of its own keeps the fix registered with it.
	create := func() response {
		return do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"name":"taken","resource_class":"gpu"}`), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	if r := create(); r.code != http.StatusCreated {
		t.Fatalf("the first allocation: %d %s", r.code, r.body)
	}
	taken := create()
	if e := read(taken); taken.code != http.StatusConflict || e.Reason != string(apierror.ReasonAllocationNameTaken) ||
		!strings.Contains(e.Fix, "openstack baremetal allocation show taken") {
		t.Errorf("a name taken: %d %s", taken.code, taken.body)
	}
}

// TestIronicNodeIdentsInABodyOrQueryAreChecked: a node named in a request's
// body or query ("" or "..": no name an object can have) reached the store
// as an object name, and its refusal came back in the store's words ("Name
// parameter required.", "may not be '..'"). As Ironic: an ident that is
// neither a UUID nor a logical name is refused as one, and a logical name
// no node has is not found.
func TestIronicNodeIdentsInABodyOrQueryAreChecked(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "n1")
	op := tokenFor(t, s, "ops", "nodus:operators")
	create := func(body string) response {
		return do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	for body, want := range map[string]string{
		`{"resource_class":"gpu","node":""}`:                "Expected a logical name or UUID but received .",
		`{"resource_class":"gpu","node":"a/b"}`:             "Expected a logical name or UUID but received a/b.",
		`{"resource_class":"gpu","node":".."}`:              "Node .. could not be found",
		`{"resource_class":"gpu","candidate_nodes":["."]}`:  "Node . could not be found.",
		`{"resource_class":"gpu","candidate_nodes":[""]}`:   "Expected a logical name or UUID but received .",
		`{"resource_class":"gpu","candidate_nodes":["n1"]}`: "",
	} {
		r := create(body)
		if want == "" {
			if r.code != http.StatusCreated {
				t.Errorf("%s: %d %s", body, r.code, r.body)
			}
			continue
		}
		if msg := ironicFault(t, r, http.StatusBadRequest); msg != want {
			t.Errorf("%s: %q, want %q", body, msg, want)
		}
	}
	for value, want := range map[string]string{".": "Node . could not be found", "..": "Node .. could not be found", "x y": "Expected a logical name or UUID but received x y."} {
		r := do(t, op, "GET", "/v1/allocations?node="+url.QueryEscape(value), "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
		if msg := ironicFault(t, r, http.StatusBadRequest); msg != want {
			t.Errorf("node=%s: %q, want %q", value, msg, want)
		}
	}
}

// TestAnIronicAllocationPatchKeepsItsOwnWords: a /v1 allocation patch that
// did not apply was answered in the words of the Kubernetes API's patch
// ("the patch cannot be applied: …"), and any refusal of its update as 400
// whatever its code.
func TestAnIronicAllocationPatchKeepsItsOwnWords(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	if r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"name":"a1","resource_class":"gpu"}`), "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusCreated {
		t.Fatalf("the allocation: %d %s", r.code, r.body)
	}
	r := do(t, op, "PATCH", "/v1/allocations/a1", "application/json", strings.NewReader(`[{"op":"remove","path":"/extra/no-such-key"}]`), "X-OpenStack-Ironic-API-Version", "1.60")
	if msg := ironicFault(t, r, http.StatusBadRequest); !strings.HasPrefix(msg, "Patch does not apply") {
		t.Errorf("a patch that does not apply: %q", msg)
	}
}

// TestAnIronicBodyThatCannotBeReadIsABadRequest: any failure to read a
// write's body was answered 413 "the request body takes at most 65536
// bytes", a body of a few bytes included. A body that is no valid HTTP
// (here, a chunk whose size is not hexadecimal) is a 400; only one over
// the bound is a 413.
func TestAnIronicBodyThatCannotBeReadIsABadRequest(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	send := func(chunked string) (int, string) {
		t.Helper()
		tlsConfig, err := rest.TLSConfigFor(op)
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig.NextProtos = []string{"http/1.1"}
		host := strings.TrimPrefix(s.Config.Host, "https://")
		conn, err := tls.Dial("tcp", host, tlsConfig)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/allocations HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nX-OpenStack-Ironic-API-Version: 1.60\r\n"+
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%s", host, op.BearerToken, chunked)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
		return resp.StatusCode, body.String()
	}
	if code, body := send("zz\r\n{}\r\n0\r\n\r\n"); code != http.StatusBadRequest || !strings.Contains(body, "error_message") {
		t.Errorf("a body of bad chunks: %d %s", code, body)
	}
	big := strings.Repeat("x", 70<<10)
	if code, body := send(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the bound: %d %s", code, body)
	}
}

// TestIronicIsTheOperatorsAlone: /v1 answers operators only. A project's
// admin, member and viewer (also through Ironic's X-Auth-Token) and a node
// agent's certificate are refused every read and write of it, whatever
// exists, so that neither what a node holds nor whether it exists reaches
// them; nothing changes.
func TestIronicIsTheOperatorsAlone(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "n1")
	agent := enrollAgent(t, s, "agent-node", nodusv1.EnrollmentTokenSpec{Pool: "gpu", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	op := tokenFor(t, s, "ops", "nodus:operators")
	if r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"name":"a1","resource_class":"gpu-h100x8"}`), "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusCreated {
		t.Fatalf("the operator's allocation: %d %s", r.code, r.body)
	}
	requests := []struct{ method, path, body string }{
		{"GET", "/v1/nodes", ""},
		{"GET", "/v1/nodes/detail", ""},
		{"GET", "/v1/nodes/n1", ""},
		{"GET", "/v1/nodes/agent-node", ""},
		{"GET", "/v1/nodes/no-such-node", ""},
		{"GET", "/v1/allocations", ""},
		{"GET", "/v1/allocations/a1", ""},
		{"GET", "/v1/nodes/n1/allocation", ""},
		{"POST", "/v1/allocations", `{"name":"theirs","resource_class":"gpu-h100x8"}`},
		{"PATCH", "/v1/nodes/n1", `[{"op":"add","path":"/extra/k","value":"v"}]`},
		{"PATCH", "/v1/nodes/agent-node", `[{"op":"replace","path":"/maintenance","value":true}]`},
		{"PATCH", "/v1/allocations/a1", `[{"op":"add","path":"/extra/k","value":"v"}]`},
		{"PUT", "/v1/nodes/n1/maintenance", `{"reason":"mine"}`},
		{"DELETE", "/v1/allocations/a1", ""},
		{"DELETE", "/v1/nodes/n1/allocation", ""},
	}
	callers := map[string]struct {
		cfg    *rest.Config
		header []string
	}{
		"a project's admin":                      {cfg: f.admin},
		"a project's member":                     {cfg: f.member},
		"a project's viewer":                     {cfg: f.viewer},
		"a project's admin through X-Auth-Token": {cfg: anonymous(s), header: []string{"X-Auth-Token", f.admin.BearerToken}},
		"a node agent":                           {cfg: agent},
	}
	for who, c := range callers {
		for _, req := range requests {
			var body *strings.Reader
			if req.body != "" {
				body = strings.NewReader(req.body)
			}
			header := append([]string{"X-OpenStack-Ironic-API-Version", "1.60"}, c.header...)
			var r response
			if body != nil {
				r = do(t, c.cfg, req.method, req.path, "application/json", body, header...)
			} else {
				r = do(t, c.cfg, req.method, req.path, "", nil, header...)
			}
			if r.code != http.StatusForbidden {
				t.Errorf("%s: %s %s: %d %s", who, req.method, req.path, r.code, r.body)
			}
		}
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{}); err != nil || n.Spec.Maintenance || len(n.Spec.Extra) != 0 {
		t.Errorf("node n1 after the refused writes: %v %+v", err, n.Spec)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "agent-node", metav1.GetOptions{}); err != nil || n.Spec.Maintenance {
		t.Errorf("the agent's node after the refused writes: %v %+v", err, n.Spec)
	}
	list, err := s.Client.NodusV1().Allocations().List(ctx(t), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || len(list.Items[0].Spec.Extra) != 0 {
		t.Errorf("the allocations after the refused writes: %v %+v", err, list)
	}
}
