package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
