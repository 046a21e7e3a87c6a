package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestANodesExtraHasABound: /v1 takes at most 64 KiB a request, but a
// node's extra grew by every PATCH that added a key, towards etcd's request
// limit (then a raw store error, a 500, and every later write of the node,
// a claim or a status, failing as well). Like Ironic's column, extra holds
// 64 KiB: past it, 400, and the node as it was.
func TestANodesExtraHasABound(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "big")
	op := tokenFor(t, s, "ops", "nodus:operators")
	add := func(key string) response {
		body := fmt.Sprintf(`[{"op":"add","path":"/extra/%s","value":%q}]`, key, strings.Repeat("x", 40<<10))
		return do(t, op, "PATCH", "/v1/nodes/big", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	if r := add("first"); r.code != http.StatusOK {
		t.Fatalf("the first 40 KiB: %d %s", r.code, r.body)
	}
	if msg := ironicFault(t, add("second"), http.StatusBadRequest); !strings.Contains(msg, "extra") {
		t.Errorf("extra past 64 KiB: %q", msg)
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Spec.Extra["second"]; ok || len(n.Spec.Extra["first"]) != 40<<10 {
		t.Errorf("the node's extra after a refused patch: %d keys", len(n.Spec.Extra))
	}
}

// TestAMaintenanceReasonIsStoredOrRefused: a patch that set only
// maintenance_reason on a node not in maintenance answered 200, the
// reason dropped. Nodus keeps a reason only in maintenance (the Kubernetes
// API refuses it otherwise): 400, the node as it was; one that leaves
// maintenance takes its reason away, as Ironic.
func TestAMaintenanceReasonIsStoredOrRefused(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "n1")
	op := tokenFor(t, s, "ops", "nodus:operators")
	patch := func(body string) response {
		return do(t, op, "PATCH", "/v1/nodes/n1", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	if msg := ironicFault(t, patch(`[{"op":"add","path":"/maintenance_reason","value":"disk"}]`), http.StatusBadRequest); !strings.Contains(msg, "maintenance") {
		t.Errorf("a reason without maintenance: %q", msg)
	}
	if r := patch(`[{"op":"replace","path":"/maintenance","value":true},{"op":"add","path":"/maintenance_reason","value":"disk"}]`); r.code != http.StatusOK {
		t.Fatalf("maintenance with a reason: %d %s", r.code, r.body)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{}); err != nil || n.Spec.MaintenanceReason != "disk" {
		t.Fatalf("the reason in maintenance: %v %+v", err, n.Spec)
	}
	if r := patch(`[{"op":"replace","path":"/maintenance","value":false}]`); r.code != http.StatusOK {
		t.Fatalf("out of maintenance: %d %s", r.code, r.body)
	}
	if n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "n1", metav1.GetOptions{}); err != nil || n.Spec.Maintenance || n.Spec.MaintenanceReason != "" {
		t.Errorf("out of maintenance: %v %+v", err, n.Spec)
	}
}

// TestAnAllocationListRefusesAnUnknownArgument: a filter misspelt
// (resouce_class) listed every allocation, as if it had matched; the node
// list answers 400 "Unknown argument", as Ironic does for both.
func TestAnAllocationListRefusesAnUnknownArgument(t *testing.T) {
	s := testserver.StartTestServer(t)
	op := tokenFor(t, s, "ops", "nodus:operators")
	list := func(query string) response {
		return do(t, op, "GET", "/v1/allocations?"+query, "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	}
	if msg := ironicFault(t, list("resouce_class=gpu"), http.StatusBadRequest); !strings.Contains(msg, "resouce_class") {
		t.Errorf("a misspelt filter: %q", msg)
	}
	if r := list("resource_class=gpu&state=active&owner=acme&limit=5&sort_key=created_at&sort_dir=desc&fields=uuid,state"); r.code != http.StatusOK {
		t.Errorf("Ironic's own arguments: %d %s", r.code, r.body)
	}
}

// TestAPatchThatIsNullIsRefused: Ironic's PATCH takes a list of operations
// and refuses a body of `null` (400); Nodus took it for no operations and
// answered 200, as if a change had been made. An empty list is still a
// patch of nothing.
func TestAPatchThatIsNullIsRefused(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "patched")
	op := tokenFor(t, s, "ops", "nodus:operators")
	patch := func(body string) response {
		return do(t, op, "PATCH", "/v1/nodes/patched", "application/json", strings.NewReader(body), "X-OpenStack-Ironic-API-Version", "1.60")
	}
	ironicFault(t, patch(`null`), http.StatusBadRequest)
	if r := patch(`[]`); r.code != http.StatusOK {
		t.Errorf("an empty list of operations: %d %s", r.code, r.body)
	}
}

// TestAnInstanceUUIDFilterIsAUUID: the node list's instance_uuid filter
// compared the raw string: a UUID in capitals matched nothing, and a value
// that is no UUID listed nothing where Ironic answers 400.
func TestAnInstanceUUIDFilterIsAUUID(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "taken")
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "instance"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8", Node: "taken"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := waitAllocation(t, s, "instance"); a.Status.State != nodusv1.AllocationStateActive {
		t.Fatalf("the allocation: %+v", a.Status)
	}
	op := tokenFor(t, s, "ops", "nodus:operators")
	list := func(value string) response {
		return do(t, op, "GET", "/v1/nodes?instance_uuid="+url.QueryEscape(value), "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	}
	var all struct {
		Nodes []struct {
			Name         string `json:"name"`
			InstanceUUID string `json:"instance_uuid"`
		} `json:"nodes"`
	}
	r := do(t, op, "GET", "/v1/nodes?fields=name,instance_uuid", "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	if err := json.Unmarshal(r.body, &all); err != nil || r.code != http.StatusOK {
		t.Fatalf("the node list: %d %s", r.code, r.body)
	}
	instance := ""
	for _, n := range all.Nodes {
		if n.Name == "taken" {
			instance = n.InstanceUUID
		}
	}
	if instance == "" {
		t.Fatalf("the allocated node shows no instance_uuid: %s", r.body)
	}
	for _, spelling := range []string{instance, strings.ToUpper(instance)} {
		if got := list(spelling); got.code != http.StatusOK || !strings.Contains(string(got.body), `"taken"`) {
			t.Errorf("instance_uuid=%s: %d %s", spelling, got.code, got.body)
		}
	}
	ironicFault(t, list("not-a-uuid"), http.StatusBadRequest)
}
