package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/baremetal/noauth"
	"github.com/gophercloud/gophercloud/v2/openstack/utils"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestIronicDiscoveryIsPublic: as Ironic, GET / and GET /v1 answer anyone,
// and / is both Ironic's root document and the Kubernetes path index;
// nothing else is public.
func TestIronicDiscoveryIsPublic(t *testing.T) {
	s := testserver.StartTestServer(t)
	nobody := anonymous(s)

	r := do(t, nobody, "GET", "/", "", nil)
	var root struct {
		Name           string
		Versions       []map[string]interface{}
		DefaultVersion map[string]interface{} `json:"default_version"`
		Paths          []string
	}
	if err := json.Unmarshal(r.body, &root); r.code != 200 || err != nil {
		t.Fatalf("GET / without credentials: %d %v %s", r.code, err, r.body)
	}
	if root.Name == "" || len(root.Versions) != 1 || root.DefaultVersion["id"] != "v1" || root.DefaultVersion["min_version"] != "1.1" ||
		root.DefaultVersion["version"] != "1.60" || root.DefaultVersion["status"] != "CURRENT" {
		t.Errorf("the root document: %s", r.body)
	}
	if !slices.Contains(root.Paths, "/apis/nodus.dev/v1") || !slices.Contains(root.Paths, "/v1") {
		t.Errorf("the root document must hold the path index too: %v", root.Paths)
	}
	for _, path := range []string{"/v1", "/v1/"} {
		r := do(t, nobody, "GET", path, "", nil)
		var v1 struct{ Version map[string]interface{} }
		if err := json.Unmarshal(r.body, &v1); r.code != 200 || err != nil || v1.Version["version"] != "1.60" {
			t.Errorf("GET %s without credentials: %d %v %s", path, r.code, err, r.body)
		}
	}
	// What the server holds stays behind authentication.
	for _, path := range []string{"/v1/nodes", "/v1/allocations", "/apis/nodus.dev/v1/nodes", "/apis"} {
		if r := do(t, nobody, "GET", path, "", nil); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d, want 401", path, r.code)
		}
	}
	// kubectl get --raw / still finds its paths, as the operator.
	var asOperator struct{ Paths []string }
	raw, err := s.Client.Discovery().RESTClient().Get().AbsPath("/").DoRaw(ctx(t))
	if err != nil || json.Unmarshal(raw, &asOperator) != nil || !slices.Contains(asOperator.Paths, "/apis/nodus.dev/v1") {
		t.Errorf("GET / as the operator: %v %s", err, raw)
	}

	// gophercloud finds the microversions without a token, from /v1/ and
	// from the service root.
	transport, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	for _, endpoint := range []string{s.Config.Host + "/v1/", s.Config.Host + "/"} {
		client, err := noauth.NewBareMetalNoAuth(noauth.EndpointOpts{IronicEndpoint: endpoint})
		if err != nil {
			t.Fatal(err)
		}
		client.HTTPClient = http.Client{Transport: transport, Timeout: time.Minute}
		versions, err := utils.GetSupportedMicroversions(ctx(t), client)
		if err != nil || versions.MinMajor != 1 || versions.MinMinor != 1 || versions.MaxMajor != 1 || versions.MaxMinor != 60 {
			t.Errorf("gophercloud's GetSupportedMicroversions at %s: %+v %v", endpoint, versions, err)
		}
	}
}

// TestIronicFieldsByMicroversion: a node shows the fields of the request's
// microversion, as Ironic's; fields may name any Ironic node field, those
// Nodus has no value for are null, those of a later version 406.
func TestIronicFieldsByMicroversion(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "fv-0")
	op := tokenFor(t, s, "ops", "nodus:operators")
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "fv-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	show := func(version, query string) (int, map[string]interface{}) {
		// By UUID: below 1.5 a node has no name to be found by.
		r := do(t, op, "GET", "/v1/nodes/"+string(n.UID)+query, "", nil, "X-OpenStack-Ironic-API-Version", version)
		var node map[string]interface{}
		_ = json.Unmarshal(r.body, &node)
		return r.code, node
	}
	if code, node := show("1.1", ""); code != 200 || node["uuid"] == nil {
		t.Fatalf("at 1.1: %d %v", code, node)
	} else {
		for _, later := range []string{"name", "resource_class", "traits", "owner", "conductor_group", "allocation_uuid"} {
			if _, ok := node[later]; ok {
				t.Errorf("a node at 1.1 shows %s, which came later", later)
			}
		}
	}
	if code, node := show("1.60", ""); code != 200 || node["name"] != "fv-0" || node["resource_class"] == nil {
		t.Errorf("at 1.60: %d %v", code, node)
	}
	code, node := show("1.60", "?fields=uuid,name,last_error,chassis_uuid,owner")
	if code != 200 || node["name"] != "fv-0" || len(node) != 6 { // the five, and links
		t.Errorf("fields at 1.60: %d %v", code, node)
	}
	for _, f := range []string{"last_error", "chassis_uuid", "owner"} {
		if v, ok := node[f]; !ok || v != nil {
			t.Errorf("field %s, which Nodus has no value for, must be null: %v", f, node)
		}
	}
	for _, c := range []struct {
		version, query string
		want           int
	}{
		{"1.60", "?fields=lessee", http.StatusNotAcceptable}, // 1.65
		{"1.49", "?fields=owner", http.StatusNotAcceptable},  // 1.50
		{"1.7", "?fields=uuid", http.StatusNotAcceptable},    // fields: 1.8
		{"1.60", "?fields=no_such_field", http.StatusBadRequest},
	} {
		if code, body := show(c.version, c.query); code != c.want {
			t.Errorf("%s at %s: %d %v, want %d", c.query, c.version, code, body, c.want)
		}
	}
	r := do(t, op, "GET", "/v1/nodes?fields=uuid,last_error", "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	var list struct{ Nodes []map[string]interface{} }
	if json.Unmarshal(r.body, &list); r.code != 200 || len(list.Nodes) != 1 || list.Nodes[0]["uuid"] == nil {
		t.Errorf("a list with fields: %d %s", r.code, r.body)
	} else if v, ok := list.Nodes[0]["last_error"]; !ok || v != nil {
		t.Errorf("a listed field Nodus has no value for must be null: %s", r.body)
	}
}

// TestIronicGetByUUIDRightAfterCreate: an allocation listed, or read by its
// UUID, at once after its creation is found, every time (the watch cache
// may not have it yet; etcd does).
func TestIronicGetByUUIDRightAfterCreate(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	for i := range 40 {
		r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"none-such"}`),
			"X-OpenStack-Ironic-API-Version", "1.60")
		var created struct{ UUID string }
		if err := json.Unmarshal(r.body, &created); r.code != http.StatusCreated || err != nil {
			t.Fatalf("create %d: %d %s", i, r.code, r.body)
		}
		if got := do(t, op, "GET", "/v1/allocations", "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); got.code != 200 ||
			!strings.Contains(string(got.body), created.UUID) {
			t.Fatalf("the list right after create %d: %d, lists %s: %v", i, got.code, created.UUID, strings.Contains(string(got.body), created.UUID))
		}
		if got := do(t, op, "GET", "/v1/allocations/"+created.UUID, "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); got.code != 200 {
			t.Fatalf("GET by UUID right after create %d: %d %s", i, got.code, got.body)
		}
	}
}

// TestIronicAllocationCandidatesAreResolved: candidate_nodes given by name
// or UUID are stored as UUIDs at creation, an unknown one is a 400, and a
// backfill without resource_class takes the node's, as in Ironic.
func TestIronicAllocationCandidatesAreResolved(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "cand-0", "cand-1")
	op := tokenFor(t, s, "ops", "nodus:operators")
	post := func(body string) response {
		return do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	n1, err := s.Client.NodusV1().Nodes().Get(ctx(t), "cand-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := post(`{"resource_class":"gpu-h100x8","candidate_nodes":["cand-0","` + string(n1.UID) + `"]}`)
	var created struct {
		CandidateNodes []string `json:"candidate_nodes"`
	}
	n0, _ := s.Client.NodusV1().Nodes().Get(ctx(t), "cand-0", metav1.GetOptions{})
	if err := json.Unmarshal(r.body, &created); r.code != http.StatusCreated || err != nil ||
		len(created.CandidateNodes) != 2 || created.CandidateNodes[0] != string(n0.UID) || created.CandidateNodes[1] != string(n1.UID) {
		t.Errorf("candidates by name and UUID: %d %s", r.code, r.body)
	}
	if r := post(`{"resource_class":"gpu-h100x8","candidate_nodes":["no-such-node"]}`); r.code != http.StatusBadRequest {
		t.Errorf("an unknown candidate: %d %s, want 400", r.code, r.body)
	}
	// A UUID names a node in any case and form, as it names an allocation
	// (Ironic's is_uuid_like). The node looked up is one no allocation
	// takes (its agent never beat): the allocations above may land on
	// either candidate, whenever the controller gets to them.
	f.node(t, "idle")
	idle, err := s.Client.NodusV1().Nodes().Get(ctx(t), "idle", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{strings.ToUpper(string(n0.UID)), "{" + string(n0.UID) + "}"} {
		r := post(`{"resource_class":"gpu-h100x8","candidate_nodes":["` + form + `"]}`)
		if json.Unmarshal(r.body, &created); r.code != http.StatusCreated || len(created.CandidateNodes) != 1 || created.CandidateNodes[0] != string(n0.UID) {
			t.Errorf("a candidate as %s: %d %s", form, r.code, r.body)
		}
	}
	for _, form := range []string{strings.ToUpper(string(idle.UID)), "{" + string(idle.UID) + "}"} {
		if r := do(t, op, "GET", "/v1/nodes/"+form+"/allocation", "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusNotFound ||
			!strings.Contains(string(r.body), "has no allocation") && !strings.Contains(string(r.body), "allocation") {
			t.Errorf("the allocation of node %s: %d %s, want 404 (found, no allocation)", form, r.code, r.body)
		}
	}
	r = post(`{"node":"cand-1","name":"backfill-1"}`)
	var backfill struct {
		ResourceClass string `json:"resource_class"`
	}
	if json.Unmarshal(r.body, &backfill); r.code != http.StatusCreated || backfill.ResourceClass != "gpu-h100x8" {
		t.Errorf("a backfill without resource_class takes the node's: %d %s", r.code, r.body)
	}
}

// TestIronicAllocationOwnerFrom160: an allocation shows owner from 1.60,
// as Ironic's.
func TestIronicAllocationOwnerFrom160(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"x","name":"owned"}`),
		"X-OpenStack-Ironic-API-Version", "1.59")
	var at159, at160 map[string]interface{}
	if json.Unmarshal(r.body, &at159); r.code != http.StatusCreated {
		t.Fatalf("create at 1.59: %d %s", r.code, r.body)
	}
	if _, ok := at159["owner"]; ok {
		t.Errorf("an allocation at 1.59 shows owner: %s", r.body)
	}
	r = do(t, op, "GET", "/v1/allocations/owned", "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	if json.Unmarshal(r.body, &at160); r.code != 200 {
		t.Fatalf("show at 1.60: %d %s", r.code, r.body)
	}
	if _, ok := at160["owner"]; !ok {
		t.Errorf("an allocation at 1.60 must show owner: %s", r.body)
	}
}

// TestOrphanedNodeClaimsAreRepaired: a node left naming an allocation that
// no longer exists (deleted while its claim was being written, or a server
// that stopped between the two writes) is freed by the allocation
// controller, and an allocation can have it again.
func TestOrphanedNodeClaimsAreRepaired(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "orphan-0")
	c := s.Client.NodusV1()
	claimFor(t, s, "orphan-0", "deleted-meanwhile")
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		n, err := c.Nodes().Get(ctx, "orphan-0", metav1.GetOptions{})
		return err == nil && n.Status.Allocation == "", nil
	}); err != nil {
		t.Fatal("the node still names an allocation that does not exist")
	}
	op := tokenFor(t, s, "ops", "nodus:operators")
	r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"gpu-h100x8","name":"after-orphan"}`),
		"X-OpenStack-Ironic-API-Version", "1.60")
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		a, err := c.Allocations().Get(ctx, "after-orphan", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "orphan-0", nil
	}); err != nil {
		t.Error("the freed node was not allocated again")
	}
}

// TestANodeWhoseAllocationWasDeletedAloneIsFreed: a server that stopped
// between an allocation's delete and the clear of its node's claim (or
// whose clear failed) leaves the node naming an allocation that no longer
// exists, and nothing about the node changes to show it. The allocation's
// deletion alone frees the node, at once rather than at the next resync.
func TestANodeWhoseAllocationWasDeletedAloneIsFreed(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "cut-0")
	c := s.Client.NodusV1()
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "cut"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		a, err := c.Allocations().Get(ctx, "cut", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "cut-0", nil
	}); err != nil {
		t.Fatal("the allocation never became active")
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	// The delete's first write, without its second.
	if resp, err := etcd.Delete(ctx(t), "/registry/nodus.dev/allocations/cut"); err != nil || resp.Deleted != 1 {
		t.Fatalf("deleting the allocation from etcd: %v %+v", err, resp)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		n, err := c.Nodes().Get(ctx, "cut-0", metav1.GetOptions{})
		return err == nil && n.Status.Allocation == "", nil
	}); err != nil {
		t.Fatal("the node still names its deleted allocation")
	}
}

// TestAClaimItsAllocationDidNotTakeIsRepaired: two allocation controllers
// at once (an old leader that has not noticed yet) may each claim a node
// for one allocation; the allocation ends active on one of them, and the
// other node stays claimed by an allocation that is not on it. Such a
// claim, which lands after the allocation settled, is freed, and the node
// serves the next allocation.
func TestAClaimItsAllocationDidNotTakeIsRepaired(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "taken-0")
	c := s.Client.NodusV1()
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		a, err := c.Allocations().Get(ctx, "once", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "taken-0", nil
	}); err != nil {
		t.Fatal("the allocation never became active")
	}
	readyNodes(t, f, "stale-0")
	claimFor(t, s, "stale-0", "once") // the other controller's claim, landing late
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		n, err := c.Nodes().Get(ctx, "stale-0", metav1.GetOptions{})
		return err == nil && n.Status.Allocation == "", nil
	}); err != nil {
		t.Fatal("the node still names an allocation that is active on another node")
	}
	if n, err := c.Nodes().Get(ctx(t), "taken-0", metav1.GetOptions{}); err != nil || n.Status.Allocation != "once" {
		t.Errorf("the allocation's own node lost its claim: %v %q", err, n.Status.Allocation)
	}
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "next"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(ctx context.Context) (bool, error) {
		a, err := c.Allocations().Get(ctx, "next", metav1.GetOptions{})
		return err == nil && a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "stale-0", nil
	}); err != nil {
		t.Error("the freed node was not allocated again")
	}
}

// claimFor writes node's claim for allocation, as a controller that lost
// track of it would have.
func claimFor(t *testing.T, s *testserver.Server, node, allocation string) {
	t.Helper()
	// Past the API: no client's status write moves a claim
	// (TestAnOperatorsStatusWriteMovesNoClaim).
	forgeNodeInEtcd(t, s, node, func(n *nodusv1.Node) { n.Status.Allocation = allocation })
}

// ironicFault checks that r is an Ironic error of code and returns its
// faultstring.
func ironicFault(t *testing.T, r response, code int) string {
	t.Helper()
	var outer struct {
		ErrorMessage string `json:"error_message"`
		Fix          string `json:"fix"`
	}
	var inner struct {
		Faultstring string `json:"faultstring"`
	}
	if r.code != code || json.Unmarshal(r.body, &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil ||
		inner.Faultstring == "" || outer.Fix == "" {
		t.Errorf("want an Ironic error %d with a fix: %d %s", code, r.code, r.body)
	}
	return inner.Faultstring
}

// TestIronicNodeAllocationOfUnknownNode: as Ironic, showing the allocation
// of a node that does not exist is a 400 (the node is looked up as a list
// filter), deleting it a 404; a node without one is a 404; a node ident
// that is neither a UUID nor a logical name is a 400.
func TestIronicNodeAllocationOfUnknownNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "lonely")
	op := tokenFor(t, s, "ops", "nodus:operators")
	call := func(method, path string) response {
		return do(t, op, method, path, "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	}
	for _, ident := range []string{"no-such-node", "00000000-0000-0000-0000-000000000000"} {
		if msg := ironicFault(t, call("GET", "/v1/nodes/"+ident+"/allocation"), http.StatusBadRequest); msg != "Node "+ident+" could not be found." {
			t.Errorf("GET the allocation of unknown node %s: %q", ident, msg)
		}
		if msg := ironicFault(t, call("DELETE", "/v1/nodes/"+ident+"/allocation"), http.StatusNotFound); msg != "Node "+ident+" could not be found." {
			t.Errorf("DELETE the allocation of unknown node %s: %q", ident, msg)
		}
	}
	for _, method := range []string{"GET", "DELETE"} {
		if msg := ironicFault(t, call(method, "/v1/nodes/lonely/allocation"), http.StatusNotFound); msg != "Allocation for node lonely was not found" {
			t.Errorf("%s the allocation of a node without one: %q", method, msg)
		}
	}
	if msg := ironicFault(t, call("GET", "/v1/nodes/bad%20name/allocation"), http.StatusBadRequest); msg != "Expected UUID or name for node: bad name" {
		t.Errorf("a node ident that is no name: %q", msg)
	}
}

// TestIronicNodeIdentsAsIronicChecksThem: as Ironic's node controller, an
// ident that is neither a UUID nor a logical name is a 400 before anything
// is looked up; a node is looked up before the fields asked for are checked
// (an unknown node is a 404 whatever the fields); and below 1.5, which has
// no node names, a name finds nothing while the UUID does.
func TestIronicNodeIdentsAsIronicChecksThem(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "named")
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "named", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	op := tokenFor(t, s, "ops", "nodus:operators")
	call := func(method, path, version string) response {
		var body io.Reader
		if method == "PATCH" {
			body = strings.NewReader(`[{"op":"add","path":"/extra/k","value":"v"}]`)
		}
		return do(t, op, method, path, "application/json", body, "X-OpenStack-Ironic-API-Version", version)
	}
	for _, method := range []string{"GET", "PATCH"} {
		if msg := ironicFault(t, call(method, "/v1/nodes/bad%20name", "1.60"), http.StatusBadRequest); msg != "Expected UUID or name for node_ident: bad name" {
			t.Errorf("%s a node ident that is no name: %q", method, msg)
		}
	}
	if msg := ironicFault(t, call("GET", "/v1/nodes/no-such-node?fields=owner", "1.49"), http.StatusNotFound); msg != "Node no-such-node could not be found." {
		t.Errorf("an unknown node with a field of a later version: %q", msg)
	}
	if msg := ironicFault(t, call("GET", "/v1/nodes/no-such-node?fields=no_such_field", "1.60"), http.StatusNotFound); msg != "Node no-such-node could not be found." {
		t.Errorf("an unknown node with a field that is none: %q", msg)
	}
	later := call("GET", "/v1/nodes/named?fields=owner", "1.49")
	var fix struct{ Fix string }
	if msg := ironicFault(t, later, http.StatusNotAcceptable); msg == "" || json.Unmarshal(later.body, &fix) != nil ||
		!strings.Contains(fix.Fix, "X-OpenStack-Ironic-API-Version: 1.60") {
		t.Errorf("a field of a later version: %q, fix %q (want the microversion to send)", msg, fix.Fix)
	}
	if msg := ironicFault(t, call("GET", "/v1/nodes/named", "1.4"), http.StatusNotFound); msg != "Node named could not be found." {
		t.Errorf("a node name below 1.5: %q", msg)
	}
	if r := call("GET", "/v1/nodes/"+string(n.UID), "1.4"); r.code != http.StatusOK {
		t.Errorf("a node UUID below 1.5: %d %s", r.code, r.body)
	}
	if r := call("GET", "/v1/nodes/named", "1.5"); r.code != http.StatusOK {
		t.Errorf("a node name at 1.5: %d %s", r.code, r.body)
	}
}

// ironicAllocation is what the tests read of an Ironic allocation.
type ironicAllocation struct {
	UUID  string  `json:"uuid"`
	Name  *string `json:"name"`
	Extra map[string]interface{}
}

func decodeAllocation(t *testing.T, r response, code int) ironicAllocation {
	t.Helper()
	var a ironicAllocation
	if err := json.Unmarshal(r.body, &a); r.code != code || err != nil {
		t.Fatalf("want %d and an allocation: %d %v %s", code, r.code, err, r.body)
	}
	return a
}

// reasonOf is the Nodus reason beside an Ironic error.
func reasonOf(r response) string {
	var outer struct{ Reason string }
	_ = json.Unmarshal(r.body, &outer)
	return outer.Reason
}

// TestIronicAllocationNames: allocation names are Ironic's logical names,
// kept apart from the object name, unique (409) whichever way a second
// allocation would get one — a create, a rename through /v1, a change of
// spec.ironicName, many creates at once — and found by GET, PATCH and
// DELETE.
func TestIronicAllocationNames(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	k8s := s.Client.NodusV1().Allocations()
	call := func(method, path, body string) response {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		return do(t, op, method, path, "application/json", rd, "X-OpenStack-Ironic-API-Version", "1.60")
	}
	create := func(name string) response {
		return call("POST", "/v1/allocations", `{"resource_class":"none-such","name":"`+name+`"}`)
	}
	rename := func(ident, body string) response {
		return call("PATCH", "/v1/allocations/"+ident, body)
	}

	// Capitals, _ . ~: a valid Ironic name, not an object name.
	odd := decodeAllocation(t, create("Web_Server.1~a"), http.StatusCreated)
	if odd.Name == nil || *odd.Name != "Web_Server.1~a" {
		t.Errorf("the name: %+v", odd)
	}
	if got := decodeAllocation(t, call("GET", "/v1/allocations/Web_Server.1~a", ""), http.StatusOK); got.UUID != odd.UUID {
		t.Errorf("GET by name found %s, want %s", got.UUID, odd.UUID)
	}
	list, err := k8s.List(ctx(t), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Spec.IronicName != "Web_Server.1~a" || string(list.Items[0].UID) != odd.UUID ||
		!strings.HasPrefix(list.Items[0].Name, "allocation-") {
		t.Errorf("the Kubernetes view: %v %+v", err, list)
	}
	r := create("Web_Server.1~a")
	if msg := ironicFault(t, r, http.StatusConflict); msg != "An allocation with name Web_Server.1~a already exists." || reasonOf(r) != "AllocationNameTaken" {
		t.Errorf("a second allocation of one name: %q %s", msg, r.body)
	}
	ironicFault(t, create("bad name"), http.StatusBadRequest)
	ironicFault(t, call("GET", "/v1/allocations/bad%20name", ""), http.StatusBadRequest)

	// A DNS-safe name is the object name too.
	plain := decodeAllocation(t, create("web-2"), http.StatusCreated)
	if a, err := k8s.Get(ctx(t), "web-2", metav1.GetOptions{}); err != nil || string(a.UID) != plain.UUID || a.Spec.IronicName != "web-2" {
		t.Errorf("object web-2: %v %+v", err, a)
	}
	// Renamed: the object keeps its name, the Ironic name moves.
	renamed := decodeAllocation(t, rename("web-2", `[{"op":"replace","path":"/name","value":"Web-Two"}]`), http.StatusOK)
	if renamed.UUID != plain.UUID || renamed.Name == nil || *renamed.Name != "Web-Two" {
		t.Errorf("the rename: %+v", renamed)
	}
	if got := decodeAllocation(t, call("GET", "/v1/allocations/Web-Two", ""), http.StatusOK); got.UUID != plain.UUID {
		t.Errorf("GET by the new name: %+v", got)
	}
	ironicFault(t, call("GET", "/v1/allocations/web-2", ""), http.StatusNotFound)
	if a, err := k8s.Get(ctx(t), "web-2", metav1.GetOptions{}); err != nil || a.Spec.IronicName != "Web-Two" {
		t.Errorf("the object after the rename: %v %+v", err, a)
	}
	// The name it left is free at once, though its object name is not.
	again := decodeAllocation(t, create("web-2"), http.StatusCreated)
	if again.UUID == plain.UUID {
		t.Error("the new web-2 is the renamed allocation")
	}
	if r := create("web-2"); ironicFault(t, r, http.StatusConflict) != "An allocation with name web-2 already exists." {
		t.Errorf("a second web-2: %s", r.body)
	}
	// A rename onto a taken name is refused, through /v1 and through the
	// Kubernetes API.
	r = rename("Web-Two", `[{"op":"replace","path":"/name","value":"Web_Server.1~a"}]`)
	if msg := ironicFault(t, r, http.StatusConflict); msg != "An allocation with name Web_Server.1~a already exists." {
		t.Errorf("a rename onto a taken name: %q", msg)
	}
	a, err := k8s.Get(ctx(t), "web-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Spec.IronicName = "Web_Server.1~a"
	if _, err := k8s.Update(ctx(t), a, metav1.UpdateOptions{}); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("spec.ironicName onto a taken name: %v", err)
	}
	ironicFault(t, rename("Web-Two", `[{"op":"replace","path":"/name","value":"[test]"}]`), http.StatusBadRequest)
	ironicFault(t, rename("Web-Two", `[{"op":"replace","path":"/state","value":"active"}]`), http.StatusBadRequest)
	// Removing the name leaves it unnamed, and the name free.
	if got := decodeAllocation(t, rename("Web-Two", `[{"op":"remove","path":"/name"}]`), http.StatusOK); got.Name != nil {
		t.Errorf("name removed: %+v", got)
	}
	decodeAllocation(t, create("Web-Two"), http.StatusCreated)
	// extra still patches, by name.
	if got := decodeAllocation(t, rename("Web-Two", `[{"op":"add","path":"/extra/k","value":"v"}]`), http.StatusOK); got.Extra["k"] != "v" {
		t.Errorf("extra: %+v", got)
	}
	// DELETE by name frees the name.
	if r := call("DELETE", "/v1/allocations/Web_Server.1~a", ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE by name: %d %s", r.code, r.body)
	}
	decodeAllocation(t, create("Web_Server.1~a"), http.StatusCreated)

	// Many creates of one name at once: one wins, in etcd.
	codes := make(chan int, 8)
	for range 8 {
		go func() { codes <- create("Contended_1").code }()
	}
	won := 0
	for range 8 {
		switch code := <-codes; code {
		case http.StatusCreated:
			won++
		case http.StatusConflict:
		default:
			t.Errorf("a racing create: %d", code)
		}
	}
	if won != 1 {
		t.Errorf("%d racing creates of one name succeeded", won)
	}
}

// TestIronicAllocationUUID: a uuid in the POST body is the allocation's
// UUID (and its metadata.uid); a malformed one is a 400, one in use a 409,
// as in Ironic.
func TestIronicAllocationUUID(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	post := func(body string) response {
		return do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	const want = "6c3f5a8e-1b2d-4c7e-9f0a-3d5e7b9c1a2f"
	r := post(`{"resource_class":"none-such","uuid":"` + want + `"}`)
	if got := decodeAllocation(t, r, http.StatusCreated); got.UUID != want || !strings.HasSuffix(r.header.Get("Location"), "/v1/allocations/"+want) {
		t.Errorf("the uuid asked for: %+v %s", got, r.header.Get("Location"))
	}
	if got := decodeAllocation(t, do(t, op, "GET", "/v1/allocations/"+want, "", nil, "X-OpenStack-Ironic-API-Version", "1.60"), http.StatusOK); got.UUID != want {
		t.Errorf("GET by the uuid: %+v", got)
	}
	list, err := s.Client.NodusV1().Allocations().List(ctx(t), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || string(list.Items[0].UID) != want {
		t.Errorf("metadata.uid: %v %+v", err, list)
	}
	r = post(`{"resource_class":"none-such","name":"other","uuid":"` + want + `"}`)
	if msg := ironicFault(t, r, http.StatusConflict); msg != "An allocation with UUID "+want+" already exists." || reasonOf(r) != "AllocationUUIDTaken" {
		t.Errorf("a uuid in use: %q %s", msg, r.body)
	}
	if msg := ironicFault(t, post(`{"resource_class":"none-such","uuid":"not-a-uuid"}`), http.StatusBadRequest); msg != "Expected UUID for uuid: not-a-uuid" {
		t.Errorf("a malformed uuid: %q", msg)
	}
	// Any form oslo's is_uuid_like takes; kept canonical.
	if got := decodeAllocation(t, post(`{"resource_class":"none-such","uuid":"{0D3F5A8E1B2D4C7E9F0A3D5E7B9C1A2F}"}`), http.StatusCreated); got.UUID != "0d3f5a8e-1b2d-4c7e-9f0a-3d5e7b9c1a2f" {
		t.Errorf("a braced upper-case uuid: %+v", got)
	}
	// Deleted, its UUID may be used again.
	if r := do(t, op, "DELETE", "/v1/allocations/"+want, "", nil, "X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	decodeAllocation(t, post(`{"resource_class":"none-such","uuid":"`+want+`"}`), http.StatusCreated)
}

// TestIronicNodeListDetailParameter: from 1.43 GET /v1/nodes?detail=True
// answers full nodes, as /v1/nodes/detail does; a value that is no boolean,
// or detail with fields, is a 400, as Ironic's.
func TestIronicNodeListDetailParameter(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "d-0")
	op := tokenFor(t, s, "ops", "nodus:operators")
	list := func(query string) (response, []map[string]interface{}) {
		r := do(t, op, "GET", "/v1/nodes?"+query, "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
		var body struct {
			Nodes []map[string]interface{} `json:"nodes"`
		}
		_ = json.Unmarshal(r.body, &body)
		return r, body.Nodes
	}
	for _, query := range []string{"detail=True", "detail=1"} {
		if r, nodes := list(query); r.code != 200 || len(nodes) != 1 || nodes[0]["properties"] == nil || nodes[0]["resource_class"] == nil {
			t.Errorf("?%s: %d %s, want the node in full", query, r.code, r.body)
		}
	}
	if r, nodes := list("detail=false"); r.code != 200 || len(nodes) != 1 || nodes[0]["properties"] != nil {
		t.Errorf("?detail=false: %d %s, want the summary", r.code, r.body)
	}
	for _, query := range []string{"detail=maybe", "detail=true&fields=uuid"} {
		if r, _ := list(query); r.code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want 400", query, r.code, r.body)
		}
	}
}

// TestIronicAllocationOwnerIsAskedForFrom160: below 1.60 an allocation has
// no owner to ask for in fields or to sort by (nor a node below 1.50): 406,
// as for a node's fields of a later version, never a 200 that silently
// leaves it out.
func TestIronicAllocationOwnerIsAskedForFrom160(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	if r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"x","name":"asked"}`),
		"X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	for _, tc := range []struct{ path, below, from string }{
		{"/v1/allocations?fields=uuid,owner", "1.59", "1.60"}, {"/v1/allocations?sort_key=owner", "1.59", "1.60"},
		{"/v1/allocations/asked?fields=owner", "1.59", "1.60"}, {"/v1/nodes?sort_key=owner", "1.49", "1.50"},
	} {
		if r := do(t, op, "GET", tc.path, "", nil, "X-OpenStack-Ironic-API-Version", tc.below); r.code != http.StatusNotAcceptable {
			t.Errorf("%s at %s: %d %s, want 406", tc.path, tc.below, r.code, r.body)
		}
		if r := do(t, op, "GET", tc.path, "", nil, "X-OpenStack-Ironic-API-Version", tc.from); r.code != http.StatusOK {
			t.Errorf("%s at %s: %d %s", tc.path, tc.from, r.code, r.body)
		}
	}
}

// TestIronicSortsByItsColumns: Ironic sorts by any column of its table but
// the few it lists as invalid (JSON ones: extra, traits, properties, …);
// clients sort by updated_at, power_state or driver as readily as by name.
// Those Nodus shows sort too (their null sorts first, then the UUID
// decides); the JSON ones stay a 400, as Ironic's.
func TestIronicSortsByItsColumns(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "sort-0", "sort-1")
	op := tokenFor(t, s, "ops", "nodus:operators")
	if r := do(t, op, "POST", "/v1/allocations", "application/json", strings.NewReader(`{"resource_class":"gpu-h100x8"}`),
		"X-OpenStack-Ironic-API-Version", "1.60"); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	list := func(path string) response {
		return do(t, op, "GET", path, "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	}
	for _, key := range []string{"updated_at", "power_state", "instance_uuid", "driver", "maintenance_reason", "conductor_group"} {
		if r := list("/v1/nodes?sort_key=" + key); r.code != http.StatusOK || strings.Count(string(r.body), `"uuid"`) != 2 {
			t.Errorf("nodes by %s: %d %s", key, r.code, r.body)
		}
	}
	for _, key := range []string{"updated_at", "last_error"} {
		if r := list("/v1/allocations?sort_key=" + key); r.code != http.StatusOK || strings.Count(string(r.body), `"uuid"`) != 1 {
			t.Errorf("allocations by %s: %d %s", key, r.code, r.body)
		}
	}
	for _, path := range []string{"/v1/nodes?sort_key=properties", "/v1/nodes?sort_key=extra", "/v1/allocations?sort_key=candidate_nodes"} {
		ironicFault(t, list(path), http.StatusBadRequest)
	}
}
