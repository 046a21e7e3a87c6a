package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/v1/nodes"
	"github.com/gophercloud/gophercloud/v2/pagination"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// ironicClient is gophercloud's bare-metal client for the server's /v1,
// authenticated with an operator's token in X-Auth-Token.
func ironicClient(t *testing.T, s *testserver.Server) *gophercloud.ServiceClient {
	t.Helper()
	operator := tokenFor(t, s, "ops", "nodus:operators")
	transport, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: s.Config.Host + "/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	client.HTTPClient = http.Client{Transport: transport, Timeout: time.Minute}
	client.MoreHeaders = map[string]string{"X-Auth-Token": operator.BearerToken}
	client.Microversion = "1.60"
	return client
}

// readyNodes enrolls nodes and makes their agents ready with a heartbeat.
func readyNodes(t *testing.T, f *fleet, names ...string) {
	t.Helper()
	for _, n := range names {
		f.node(t, n)
		if r := f.heartbeat(t, n, nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
			t.Fatalf("heartbeat %s: %d %s", n, r.code, r.body)
		}
	}
}

func TestIronicWithGophercloud(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "bm-0", "bm-1", "bm-2", "bm-3")
	c := ironicClient(t, s)
	ctx := ctx(t)

	t.Run("nodes", func(t *testing.T) {
		pages, err := nodes.List(c, nodes.ListOpts{}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := nodes.ExtractNodes(pages)
		if err != nil || len(all) != 4 {
			t.Fatalf("list: %v %d", err, len(all))
		}
		byName, err := nodes.Get(ctx, c, "bm-1").Extract()
		if err != nil || byName.Name != "bm-1" || byName.ResourceClass != "gpu-h100x8" {
			t.Fatalf("get by name: %v %+v", err, byName)
		}
		byUUID, err := nodes.Get(ctx, c, byName.UUID).Extract()
		if err != nil || byUUID.Name != "bm-1" {
			t.Fatalf("get by uuid: %v %+v", err, byUUID)
		}
		k8s, _ := s.Client.NodusV1().Nodes().Get(ctx, "bm-1", metav1.GetOptions{})
		if byName.UUID != string(k8s.UID) {
			t.Errorf("node uuid %s is not the Node's uid %s", byName.UUID, k8s.UID)
		}
		updated, err := nodes.Update(ctx, c, "bm-3", nodes.UpdateOpts{
			nodes.UpdateOperation{Op: nodes.ReplaceOp, Path: "/resource_class", Value: "gpu-spare"},
			nodes.UpdateOperation{Op: nodes.AddOp, Path: "/extra/rack", Value: "r12"},
		}).Extract()
		if err != nil || updated.ResourceClass != "gpu-spare" || updated.Extra["rack"] != "r12" {
			t.Fatalf("update: %v %+v", err, updated)
		}
		if k8s, _ := s.Client.NodusV1().Nodes().Get(ctx, "bm-3", metav1.GetOptions{}); k8s.Spec.ResourceClass != "gpu-spare" {
			t.Errorf("the Kubernetes view does not show the Ironic update: %+v", k8s.Spec)
		}
		if err := nodes.SetMaintenance(ctx, c, "bm-2", nodes.MaintenanceOpts{Reason: "fan"}).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		if n, _ := nodes.Get(ctx, c, "bm-2").Extract(); !n.Maintenance || n.MaintenanceReason != "fan" {
			t.Errorf("maintenance not set: %+v", n)
		}
		if err := nodes.UnsetMaintenance(ctx, c, "bm-2").ExtractErr(); err != nil {
			t.Fatal(err)
		}
		if n, _ := nodes.Get(ctx, c, "bm-2").Extract(); n.Maintenance {
			t.Errorf("maintenance not unset")
		}
	})

	t.Run("allocations", func(t *testing.T) {
		var created []*allocations.Allocation
		for _, name := range []string{"alloc-a", "alloc-b", "alloc-c"} {
			a, err := allocations.Create(ctx, c, allocations.CreateOpts{Name: name, ResourceClass: "gpu-h100x8", Extra: map[string]string{"ticket": name}}).Extract()
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if a.State != "allocating" && a.State != "active" {
				t.Errorf("new allocation state %q", a.State)
			}
			created = append(created, a)
		}
		// Three nodes of the class are available (bm-3 moved to another class).
		var active []allocations.Allocation
		err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			pages, err := allocations.List(c, allocations.ListOpts{State: "active"}).AllPages(ctx)
			if err != nil {
				return false, err
			}
			active, err = allocations.ExtractAllocations(pages)
			return len(active) == 3, err
		})
		if err != nil {
			t.Fatalf("allocations did not become active: %v %+v", err, active)
		}
		used := map[string]bool{}
		for _, a := range active {
			if a.NodeUUID == "" || used[a.NodeUUID] {
				t.Errorf("allocation %s: node %q (twice?)", a.Name, a.NodeUUID)
			}
			used[a.NodeUUID] = true
		}
		fourth, err := allocations.Create(ctx, c, allocations.CreateOpts{Name: "alloc-d", ResourceClass: "gpu-h100x8"}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		var failed *allocations.Allocation
		_ = testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			failed, err = allocations.Get(ctx, c, fourth.UUID).Extract()
			return err == nil && failed.State == "error", nil
		})
		if failed == nil || failed.State != "error" || !strings.Contains(failed.LastError, "already allocated") {
			t.Errorf("a fourth allocation must fail naming the constraint: %+v", failed)
		}

		// Paging: one per page, following the next links.
		pages := 0
		var names []string
		err = allocations.List(c, allocations.ListOpts{Limit: 1, SortKey: "name"}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			pages++
			list, err := allocations.ExtractAllocations(p)
			for _, a := range list {
				names = append(names, a.Name)
			}
			return true, err
		})
		if err != nil || strings.Join(names, ",") != "alloc-a,alloc-b,alloc-c,alloc-d" {
			t.Errorf("paged list: %v %v (%d pages)", err, names, pages)
		}
		filtered, _ := allocations.List(c, allocations.ListOpts{Node: active[0].NodeUUID}).AllPages(ctx)
		if list, _ := allocations.ExtractAllocations(filtered); len(list) != 1 || list[0].UUID != active[0].UUID {
			t.Errorf("filter by node: %+v", list)
		}

		got, err := allocations.Get(ctx, c, created[0].UUID).Extract()
		if err != nil || got.Name != "alloc-a" || got.Extra["ticket"] != "alloc-a" {
			t.Fatalf("get: %v %+v", err, got)
		}
		if byName, err := allocations.Get(ctx, c, "alloc-a").Extract(); err != nil || byName.UUID != got.UUID {
			t.Errorf("get by name: %v", err)
		}

		// The node-allocation endpoints, through the ServiceClient (gophercloud has no helper).
		var shown allocations.Allocation
		resp, err := c.Get(ctx, c.ServiceURL("nodes", got.NodeUUID, "allocation"), &shown, nil)
		if err != nil || resp.StatusCode != 200 || shown.UUID != got.UUID {
			t.Fatalf("GET node allocation: %v %+v", err, shown)
		}
		if _, err := c.Delete(ctx, c.ServiceURL("nodes", got.NodeUUID, "allocation"), nil); err != nil {
			t.Fatalf("DELETE node allocation: %v", err)
		}
		if _, err := c.Get(ctx, c.ServiceURL("nodes", got.NodeUUID, "allocation"), &shown, nil); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("after delete: %v", err)
		}
		if err := allocations.Delete(ctx, c, created[1].UUID).ExtractErr(); err != nil {
			t.Errorf("delete: %v", err)
		}
		if _, err := allocations.Get(ctx, c, created[1].UUID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("deleted allocation still there: %v", err)
		}
		freed, _ := s.Client.NodusV1().Nodes().List(ctx, metav1.ListOptions{})
		held := 0
		for _, n := range freed.Items {
			if n.Status.Allocation != "" {
				held++
			}
		}
		if held != 1 {
			t.Errorf("deleting allocations must free their nodes: %d nodes still held", held)
		}
	})
}

// TestIronicRawHTTP covers what gophercloud does not send: versions, bad
// versions, methods, error bodies, fields and markers.
func TestIronicRawHTTP(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "raw-0")
	op := tokenFor(t, s, "ops", "nodus:operators")
	get := func(path string, headers ...string) response {
		return do(t, op, "GET", path, "", nil, append([]string{"X-OpenStack-Ironic-API-Version", "1.60"}, headers...)...)
	}
	fault := func(t *testing.T, r response, code int) string {
		t.Helper()
		if r.code != code {
			t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
		}
		var outer struct {
			ErrorMessage string `json:"error_message"`
			Reason       string `json:"reason"`
			RequestID    string `json:"requestId"`
		}
		var inner map[string]interface{}
		if json.Unmarshal(r.body, &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil || inner["faultstring"] == "" {
			t.Fatalf("not an Ironic error body: %s", r.body)
		}
		// As Ironic: debuginfo is null; Nodus' own fields stand beside error_message.
		if debug, ok := inner["debuginfo"]; !ok || debug != nil || outer.Reason == "" || outer.RequestID == "" {
			t.Errorf("debuginfo must be null, the reason and request id beside error_message: %s", r.body)
		}
		// The reason's docs page names the code sent.
		if registered := apierror.Lookup(metav1.StatusReason(outer.Reason), code); registered.Code != code {
			t.Errorf("HTTP %d with reason %s, which is registered (and documented) for HTTP %d: %s", code, outer.Reason, registered.Code, r.body)
		}
		id := r.header.Get("X-OpenStack-Request-Id")
		if !strings.HasPrefix(id, "req-") || r.header.Get("Openstack-Request-Id") != id || id != "req-"+outer.RequestID {
			t.Errorf("Ironic request ids: %v (body %s)", r.header, outer.RequestID)
		}
		return inner["faultstring"].(string)
	}

	v1 := do(t, op, "GET", "/v1", "", nil)
	if v1.code != 200 || v1.header.Get("X-OpenStack-Ironic-API-Minimum-Version") != "1.1" || v1.header.Get("X-OpenStack-Ironic-API-Maximum-Version") != "1.60" ||
		v1.header.Get("X-OpenStack-Ironic-API-Version") != "1.1" {
		t.Errorf("version discovery: %d %v", v1.code, v1.header)
	}
	if r := get("/v1", "X-OpenStack-Ironic-API-Version", "latest"); r.header.Get("X-OpenStack-Ironic-API-Version") != "1.60" {
		t.Errorf("latest: %v", r.header)
	}
	if r := do(t, op, "GET", "/v1/nodes", "", nil, "OpenStack-API-Version", "baremetal 1.55"); r.header.Get("X-OpenStack-Ironic-API-Version") != "1.55" {
		t.Errorf("OpenStack-API-Version: %v", r.header)
	}
	// As microversion_parse: the baremetal entry among other services',
	// and int() of each part, leading zeros and all.
	if r := do(t, op, "GET", "/v1/nodes", "", nil, "OpenStack-API-Version", "compute 2.1, BareMetal 1.55"); r.header.Get("X-OpenStack-Ironic-API-Version") != "1.55" {
		t.Errorf("OpenStack-API-Version with two services: %d %v", r.code, r.header)
	}
	if r := get("/v1/nodes", "X-OpenStack-Ironic-API-Version", " 1.052 "); r.code != 200 || r.header.Get("X-OpenStack-Ironic-API-Version") != "1.52" {
		t.Errorf("1.052 is 1.52 in Ironic: %d %v", r.code, r.header)
	}
	for _, bad := range []string{"1.61", "2.0", "abc", "1.x", "1.", "1.52.1"} {
		fault(t, do(t, op, "GET", "/v1/nodes", "", nil, "X-OpenStack-Ironic-API-Version", bad), http.StatusNotAcceptable)
	}
	fault(t, do(t, op, "GET", "/v1/allocations", "", nil), http.StatusNotFound) // no header: 1.1, before allocations
	// Writes before 1.52 are not allowed rather than not found, as in Ironic.
	fault(t, do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"x"}`), "X-OpenStack-Ironic-API-Version", "1.51"),
		http.StatusMethodNotAllowed)
	fault(t, do(t, op, "DELETE", "/v1/allocations/anything", "", nil), http.StatusMethodNotAllowed)
	fault(t, do(t, op, "PATCH", "/v1/allocations/anything", "application/json", strings.NewReader(`[]`), "X-OpenStack-Ironic-API-Version", "1.56"),
		http.StatusMethodNotAllowed)
	fault(t, do(t, op, "PUT", "/v1/allocations", "application/json", strings.NewReader("{}"), "X-OpenStack-Ironic-API-Version", "1.60"), http.StatusMethodNotAllowed)
	// A 405 says what the resource allows (RFC 9110: Allow); HEAD is a GET
	// without its body, as in Ironic.
	for path, allow := range map[string]string{"/v1": "GET, HEAD", "/v1/nodes": "GET, HEAD", "/v1/allocations": "GET, HEAD, POST",
		"/v1/allocations/anything": "DELETE, GET, HEAD, PATCH", "/v1/nodes/anything": "GET, HEAD, PATCH", "/v1/nodes/anything/maintenance": "DELETE, PUT"} {
		method := "PUT"
		if strings.Contains(allow, "PUT") {
			method = "POST"
		}
		r := do(t, op, method, path, "application/json", strings.NewReader("{}"), "X-OpenStack-Ironic-API-Version", "1.60")
		if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != allow {
			t.Errorf("%s %s: %d, Allow %q, want 405 and %q", method, path, r.code, r.header.Get("Allow"), allow)
		}
	}
	for _, path := range []string{"/v1", "/v1/nodes", "/v1/allocations"} {
		if r := do(t, op, "HEAD", path, "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusOK || len(r.body) != 0 {
			t.Errorf("HEAD %s: %d %q", path, r.code, r.body)
		}
	}
	fault(t, do(t, anonymous(s), "GET", "/v1/nodes", "", nil), http.StatusUnauthorized)
	fault(t, do(t, f.admin, "GET", "/v1/nodes", "", nil), http.StatusForbidden)

	create := func(body string) response {
		return do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	r := create(`{"name":"raw-a","resource_class":"gpu-h100x8"}`)
	if r.code != 201 || !strings.Contains(r.header.Get("Location"), "/v1/allocations/") {
		t.Fatalf("create: %d %v %s", r.code, r.header, r.body)
	}
	unnamed := create(`{"resource_class":"gpu-h100x8"}`)
	var view map[string]interface{}
	if json.Unmarshal(unnamed.body, &view); unnamed.code != 201 || view["name"] != nil {
		t.Errorf("an unnamed allocation shows name null: %d %s", unnamed.code, unnamed.body)
	}
	fault(t, create(`{"name":"raw-b","resource_class":"gpu-h100x8","bogus":1}`), http.StatusBadRequest)
	fault(t, create(`{"name":"raw-a","resource_class":"gpu-h100x8"}`), http.StatusConflict)
	fault(t, create(`{"name":"Bad Name","resource_class":"gpu-h100x8"}`), http.StatusBadRequest)
	fault(t, create(`{"name":"raw-c"}`), http.StatusBadRequest)
	fault(t, create(`not json`), http.StatusBadRequest)
	// An owner, even null, below 1.60 is not acceptable, as Ironic's
	// _check_allowed_allocation_fields answers (before the name is looked at).
	for _, body := range []string{`{"resource_class":"x","owner":"o"}`, `{"resource_class":"x","owner":null}`, `{"name":"Bad Name","resource_class":"x","owner":"o"}`} {
		fault(t, do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(body),
			"X-OpenStack-Ironic-API-Version", "1.59"), http.StatusNotAcceptable)
	}
	fault(t, create(`{"resource_class":"x","owner":7}`), http.StatusBadRequest)

	fields := get("/v1/allocations?fields=uuid,state")
	var list struct {
		Allocations []map[string]interface{} `json:"allocations"`
		Next        string                   `json:"next"`
	}
	if err := json.Unmarshal(fields.body, &list); err != nil || len(list.Allocations) != 2 {
		t.Fatalf("fields: %v %s", err, fields.body)
	}
	for _, a := range list.Allocations {
		keys := []string{}
		for k := range a {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != "links,state,uuid" {
			t.Errorf("fields=uuid,state returned %v", keys)
		}
	}
	if list.Next != "" {
		t.Errorf("a page that is not full has no next link: %s", list.Next)
	}
	paged := get("/v1/allocations?limit=1")
	if json.Unmarshal(paged.body, &list); list.Next == "" || !strings.Contains(list.Next, "marker=") {
		t.Errorf("a full page links to the next: %s", paged.body)
	}
	for _, bad := range []string{"limit=0", "limit=-1", "limit=abc", "limit=-99999999999999999999", "marker=not-a-uuid",
		"sort_dir=up", "sort_key=bogus", "fields=bogus"} {
		fault(t, get("/v1/allocations?"+bad), http.StatusBadRequest)
	}
	// A well-formed marker of no object is not found, as in Ironic.
	fault(t, get("/v1/allocations?marker=00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
	fault(t, get("/v1/nodes?marker=00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
	for _, huge := range []string{"100000", "99999999999999999999"} {
		if r := get("/v1/allocations?limit=" + huge); r.code != 200 {
			t.Errorf("a huge limit (%s) is capped as Ironic's (Python's int has no bound): %d %s", huge, r.code, r.body)
		}
	}
	// Ironic's list parameters strip the spaces around each item.
	if r := get("/v1/allocations?fields=uuid,%20name"); r.code != 200 {
		t.Errorf("fields with a space after the comma: %d %s", r.code, r.body)
	}
	fault(t, get("/v1/nodes/00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
	fault(t, get("/v1/allocations/no-such"), http.StatusNotFound)
	f.node(t, "raw-spare") // its agent never reports: it is never allocated
	fault(t, get("/v1/nodes/raw-spare/allocation"), http.StatusNotFound)
	patch := func(path, body string) response {
		return do(t, op, "PATCH", path, "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	fault(t, patch("/v1/nodes/raw-0", `[{"op":"replace","path":"/provision_state","value":"active"}]`), http.StatusBadRequest)
	fault(t, patch("/v1/nodes/raw-0", `[{"op":"replace","path":"/traits","value":["lower-case"]}]`), http.StatusBadRequest)
	fault(t, patch("/v1/nodes/raw-0", `{"op":"replace"}`), http.StatusBadRequest)
	if r := patch("/v1/allocations/raw-a", `[{"op":"add","path":"/extra/k","value":"v"}]`); r.code != 200 {
		t.Errorf("allocation PATCH of extra: %d %s", r.code, r.body)
	}
	// As Ironic, only name and extra may change.
	fault(t, patch("/v1/allocations/raw-a", `[{"op":"replace","path":"/resource_class","value":"other"}]`), http.StatusBadRequest)
	// As Ironic: add and replace need a value (a missing one is no null),
	// a path is made of [\w-] segments, and an array index is one RFC 6901
	// allows (no sign, no leading zero). Each is refused before anything
	// changes.
	if r := do(t, op, "PUT", "/v1/nodes/raw-0/maintenance", "application/json", strings.NewReader(`{"reason":"rma"}`), "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusAccepted {
		t.Fatalf("maintenance: %d %s", r.code, r.body)
	}
	if r := patch("/v1/nodes/raw-0", `[{"op":"add","path":"/traits","value":["CUSTOM_A","CUSTOM_B","CUSTOM_C"]},{"op":"add","path":"/extra/k","value":"v"}]`); r.code != 200 {
		t.Fatalf("node PATCH of traits and extra: %d %s", r.code, r.body)
	}
	for _, body := range []string{
		`[{"op":"replace","path":"/maintenance"}]`,
		`[{"op":"replace","path":"/traits"}]`,
		`[{"op":"add","path":"/extra"}]`,
		`[{"op":"remove","path":"/traits/-1"}]`,
		`[{"op":"remove","path":"/traits/01"}]`,
		`[{"op":"replace","path":"/traits/+1","value":"CUSTOM_X"}]`,
		`[{"op":"add","path":"/extra/a~1b","value":"x"}]`,
		`[{"op":"add","path":"/extra/k","value":"w"},{"op":"replace","path":"/owner"}]`,
	} {
		fault(t, patch("/v1/nodes/raw-0", body), http.StatusBadRequest)
	}
	fault(t, patch("/v1/allocations/raw-a", `[{"op":"replace","path":"/extra"}]`), http.StatusBadRequest)
	var node struct {
		Maintenance       bool              `json:"maintenance"`
		MaintenanceReason string            `json:"maintenance_reason"`
		Traits            []string          `json:"traits"`
		Extra             map[string]string `json:"extra"`
	}
	if r := get("/v1/nodes/raw-0"); json.Unmarshal(r.body, &node) != nil || !node.Maintenance || node.MaintenanceReason != "rma" ||
		strings.Join(node.Traits, ",") != "CUSTOM_A,CUSTOM_B,CUSTOM_C" || len(node.Extra) != 1 || node.Extra["k"] != "v" {
		t.Errorf("the node after refused patches: %s", r.body)
	}
	var alloc struct {
		Extra map[string]string `json:"extra"`
	}
	if r := get("/v1/allocations/raw-a"); json.Unmarshal(r.body, &alloc) != nil || alloc.Extra["k"] != "v" {
		t.Errorf("the allocation after a refused patch: %s", r.body)
	}
	// A null value is a value: it clears, as in Ironic.
	if r := patch("/v1/nodes/raw-0", `[{"op":"replace","path":"/maintenance_reason","value":null}]`); r.code != 200 {
		t.Errorf("a null maintenance reason: %d %s", r.code, r.body)
	}
	// The maintenance body is checked as every other: an unknown field is a 400.
	fault(t, do(t, op, "PUT", "/v1/nodes/raw-0/maintenance", "application/json", strings.NewReader(`{"reasn":"typo"}`), "X-OpenStack-Ironic-API-Version", "1.60"), http.StatusBadRequest)
	fault(t, do(t, op, "PATCH", "/v1/allocations/raw-a", "application/json", strings.NewReader(`[]`), "X-OpenStack-Ironic-API-Version", "1.56"), http.StatusMethodNotAllowed)
}

// TestDeleteAllocationOfActiveNode: the allocation of an active node that is
// not in maintenance cannot be deleted (409); in maintenance it can.
func TestDeleteAllocationOfActiveNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "busy")
	c := s.Client.NodusV1()
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "busy"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reserve(t, "busy", nodusv1.ReservationPlacement{Allocation: "busy"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	f.waitHost(t, "busy", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		n, err := c.Nodes().Get(cx, "busy", metav1.GetOptions{})
		return err == nil && n.Status.ProvisionState == nodusv1.ProvisionStateActive, nil
	})
	if err != nil {
		t.Fatal("the reserved node never became active")
	}
	op := tokenFor(t, s, "ops", "nodus:operators")
	r := do(t, op, "DELETE", "/v1/nodes/busy/allocation", "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	if r.code != http.StatusConflict || !strings.Contains(string(r.body), "active and not in maintenance") {
		t.Fatalf("delete of an active node's allocation: %d %s", r.code, r.body)
	}
	k8s := do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/allocations/busy", "", nil)
	expectReason(t, k8s, http.StatusConflict, "NodeActive")
	if r := do(t, op, "PUT", "/v1/nodes/busy/maintenance", "application/json", strings.NewReader(`{"reason":"rma"}`), "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusAccepted {
		t.Fatalf("maintenance: %d %s", r.code, r.body)
	}
	if r := do(t, op, "DELETE", "/v1/nodes/busy/allocation", "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusNoContent {
		t.Errorf("in maintenance the allocation can go: %d %s", r.code, r.body)
	}
}
