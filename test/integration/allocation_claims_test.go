package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// waitAllocationUntil waits until allocation name satisfies ok.
func waitAllocationUntil(t *testing.T, s *testserver.Server, name string, ok func(*nodusv1.Allocation) bool) *nodusv1.Allocation {
	t.Helper()
	return waitUntil(t, "allocation "+name, func(c context.Context) (*nodusv1.Allocation, error) {
		return s.Client.NodusV1().Allocations().Get(c, name, metav1.GetOptions{})
	}, ok)
}

func allocationActive(a *nodusv1.Allocation) bool {
	return a.Status.State == nodusv1.AllocationStateActive
}

// TestAnAllocationMadeAgainUnderItsNameTakesNoNode: a node's claim named
// its allocation by name only. An allocation deleted and made again under
// its name before the delete freed the node (its second write), or after
// that write failed, found the node naming it and took it — whatever its
// resource class — and the delete then freed the node under it, for
// another allocation to take as well. The claim carries the allocation's
// UID: the new allocation is placed by its own terms, and the earlier
// one's claim is freed.
func TestAnAllocationMadeAgainUnderItsNameTakesNoNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	readyNodes(t, f, "earlier")
	first, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAllocationUntil(t, s, "x", allocationActive)
	if n := waitNode(t, s, "earlier", func(n *nodusv1.Node) bool { return n.Status.Allocation == "x" }); n.Status.AllocationUID != first.UID {
		t.Errorf("the claim names allocation x without its UID: %+v", n.Status)
	}
	if _, err := testfleet.Node(ctx(t), s.Client, "other-class", "fra1", "gpu-other", "ubuntu"); err != nil {
		t.Fatal(err)
	}
	if r := f.heartbeat(t, "other-class", nodusv1.NodeHeartbeat{}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	// Deleted and made again, of another class, in one step for the
	// controller: its node still names "x".
	forgeInEtcd(t, s, "/registry/nodus.dev/allocations/x", func(a *nodusv1.Allocation) {
		a.UID = types.UID(uuid.NewUUID())
		a.Spec.ResourceClass = "gpu-other"
		a.Status = nodusv1.AllocationStatus{}
	})
	again := waitAllocationUntil(t, s, "x", func(a *nodusv1.Allocation) bool { return a.UID != first.UID && allocationActive(a) })
	if again.Status.Node != "other-class" {
		t.Errorf("the allocation made again took node %s, want other-class (its class)", again.Status.Node)
	}
	freed := waitNode(t, s, "earlier", func(n *nodusv1.Node) bool { return n.Status.Allocation == "" })
	if freed.Status.AllocationUID != "" {
		t.Errorf("the freed node kept a claim's UID: %+v", freed.Status)
	}
}

// TestADeleteAFinalizerHoldsKeepsTheNode: an allocation whose delete a
// finalizer holds stays, active on its node; the node was freed all the
// same, for a second allocation to take. It is freed once the allocation
// is gone.
func TestADeleteAFinalizerHoldsKeepsTheNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	readyNodes(t, f, "held")
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "y", Finalizers: []string{"example.com/hold"}},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAllocationUntil(t, s, "y", allocationActive)
	if err := c.Allocations().Delete(ctx(t), "y", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n, err := c.Nodes().Get(ctx(t), "held", metav1.GetOptions{}); err != nil || n.Status.Allocation != "y" {
		t.Fatalf("a delete held by a finalizer freed the node of its allocation, which stays: %v %+v", err, n.Status)
	}
	y := waitAllocationUntil(t, s, "y", func(a *nodusv1.Allocation) bool { return a.DeletionTimestamp != nil })
	y.Finalizers = nil
	if _, err := c.Allocations().Update(ctx(t), y, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, s, "held", func(n *nodusv1.Node) bool { return n.Status.Allocation == "" && n.Status.AllocationUID == "" })
}

// TestAnAllocationAppliedIntoBeingClaimsItsNames: a server-side apply
// creates an object that does not exist; for an allocation it went past
// the claims of its Ironic name and UUID that a POST takes, so two
// allocations could share an Ironic name.
func TestAnAllocationAppliedIntoBeingClaimsItsNames(t *testing.T) {
	s := testserver.StartTestServer(t)
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "first"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8", IronicName: "web-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply := func(name, spec string) response {
		return do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/allocations/"+name+"?fieldManager=ops", "application/apply-patch+yaml",
			strings.NewReader(`{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"name":"`+name+`"},"spec":`+spec+`}`))
	}
	if r := apply("second", `{"resourceClass":"gpu-h100x8","ironicName":"web-1"}`); r.code != http.StatusConflict || envelopeOf(t, r).Reason != apierror.ReasonAllocationNameTaken {
		t.Errorf("an apply creating an allocation under a taken Ironic name: %d %s", r.code, r.body)
	}
	if _, err := s.Client.NodusV1().Allocations().Get(ctx(t), "second", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused allocation exists: %v", err)
	}
	r := apply("third", `{"resourceClass":"gpu-h100x8"}`)
	if r.code != http.StatusCreated {
		t.Fatalf("an apply creating an allocation: %d %s", r.code, r.body)
	}
	var created nodusv1.Allocation
	if err := json.Unmarshal(r.body, &created); err != nil || created.Spec.IronicName != "third" {
		t.Errorf("an allocation applied into being takes its object name as its Ironic name, as a POST does: %v %+v", err, created.Spec)
	}
	// Its Ironic name is claimed: a POST under it is refused.
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "fourth"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8", IronicName: "third"}}, metav1.CreateOptions{}); apierrors.ReasonForError(err) != apierror.ReasonAllocationNameTaken {
		t.Errorf("a create under the Ironic name an apply took: %v", err)
	}
	// Applied again, it is an update as before.
	if r := apply("third", `{"resourceClass":"gpu-h100x8"}`); r.code != http.StatusOK {
		t.Errorf("applying an existing allocation: %d %s", r.code, r.body)
	}
}

// TestAnAllocationShowsItsNodesUUIDByName: a node's name may look like a
// UUID (a hostname of hex digits). The allocation's node_uuid was looked
// up as if its node's name were a UUID, and came back null.
func TestAnAllocationShowsItsNodesUUIDByName(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	const hexName = "0123456789abcdef0123456789abcdef"
	readyNodes(t, f, hexName)
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "on-hex"},
		Spec: nodusv1.AllocationSpec{Node: hexName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAllocationUntil(t, s, "on-hex", allocationActive)
	node, err := s.Client.NodusV1().Nodes().Get(ctx(t), hexName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, s.Config, "GET", "/v1/allocations/on-hex", "", nil, "X-OpenStack-Ironic-API-Version", "1.60")
	var got struct {
		NodeUUID *string `json:"node_uuid"`
	}
	if err := json.Unmarshal(r.body, &got); r.code != 200 || err != nil || got.NodeUUID == nil || *got.NodeUUID != string(node.UID) {
		t.Errorf("GET /v1/allocations/on-hex: %d %s, want node_uuid %s", r.code, r.body, node.UID)
	}
}

// TestAnOlderAgentStillReports: a nodusd built before status.allocationUID
// reports its inventory by rewriting its node's whole status, without the
// field. On a node an allocation holds, that write was refused as changing
// a server-owned field, and the node's inventory, host key and address
// froze until the agent was upgraded. The claim's UID is kept instead; an
// agent that writes another UID is still refused.
func TestAnOlderAgentStillReports(t *testing.T) {
	s := testserver.StartTestServer(t)
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := enrollAgent(t, s, "older", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "on-older"},
		Spec: nodusv1.AllocationSpec{Node: "older"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimed := waitNode(t, s, "older", func(n *nodusv1.Node) bool { return n.Status.AllocationUID != "" })
	write := func(change func(status map[string]interface{})) response {
		t.Helper()
		r := do(t, agent, "GET", "/apis/nodus.dev/v1/nodes/older", "", nil)
		var node map[string]interface{}
		if err := json.Unmarshal(r.body, &node); r.code != 200 || err != nil {
			t.Fatalf("the agent reading its node: %d %v", r.code, err)
		}
		change(node["status"].(map[string]interface{}))
		body, _ := json.Marshal(node)
		return do(t, agent, "PUT", "/apis/nodus.dev/v1/nodes/older/status", "application/json", strings.NewReader(string(body)))
	}
	r := write(func(st map[string]interface{}) {
		delete(st, "allocationUID") // what a client without the field sends
		st["sshAddress"] = "203.0.113.7:22"
	})
	if r.code != 200 {
		t.Fatalf("an older agent's report on an allocated node: %d %s", r.code, r.body)
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "older", metav1.GetOptions{})
	if err != nil || n.Status.SSHAddress != "203.0.113.7:22" || n.Status.AllocationUID != claimed.Status.AllocationUID {
		t.Errorf("after the older agent's report: %v %+v", err, n.Status)
	}
	r = write(func(st map[string]interface{}) { st["allocationUID"] = string(uuid.NewUUID()) })
	if r.code != http.StatusForbidden || envelopeOf(t, r).Reason != apierror.ReasonServerOwnedField {
		t.Errorf("an agent writing another allocation UID: %d %s", r.code, r.body)
	}
}
