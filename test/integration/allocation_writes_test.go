package integration

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestTheAllocationControllersWritesKeepTheirRecords: the allocation
// controller writes its claim of a node and the allocation's status in
// process (package localwrite), not through the loopback's HTTP. What a
// write through the API leaves stays: the field manager's record of who
// wrote which fields, beside every earlier manager's, and the audit event
// of each write with who wrote what.
func TestTheAllocationControllersWritesKeepTheirRecords(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	readyNodes(t, f, "kept-0")
	before, err := c.Nodes().Get(ctx(t), "kept-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := waitAllocationUntil(t, s, "kept", allocationActive)
	n, err := c.Nodes().Get(ctx(t), "kept-0", metav1.GetOptions{})
	if err != nil || n.Status.Allocation != "kept" {
		t.Fatalf("node after the allocation: %v %+v", err, n.Status)
	}

	// The field manager: the controller's fields are its own; no earlier
	// manager's record is lost.
	if fields := controllerFields(n.ManagedFields); !strings.Contains(fields, `"f:allocation"`) || !strings.Contains(fields, `"f:allocationUID"`) {
		t.Errorf("the node's managedFields record no claim by the controller: %s", fields)
	}
	if fields := controllerFields(a.ManagedFields); !strings.Contains(fields, `"f:state"`) || !strings.Contains(fields, `"f:node"`) {
		t.Errorf("the allocation's managedFields record no status by the controller: %s", fields)
	}
	for _, m := range before.ManagedFields {
		if !slices.ContainsFunc(n.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager == m.Manager && e.Subresource == m.Subresource
		}) {
			t.Errorf("the claim dropped %s's record (%s) from the node's managedFields", m.Manager, m.Subresource)
		}
	}

	// The audit log: each write, by the server's loopback user, with its
	// request object (the built-in policy keeps writes' requests).
	log := filepath.Join(s.DataDir, "audit.log")
	var claim, status *auditEvent
	var claimed nodusv1.Node
	var settled nodusv1.Allocation
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && (claim == nil || status == nil) {
		for _, e := range auditEvents(t, log, "status") {
			var n nodusv1.Node
			var al nodusv1.Allocation
			switch {
			case e.UserAgent != "nodus-server (in process)":
			case e.ObjectRef.Resource == "nodes" && e.ObjectRef.Name == "kept-0" &&
				json.Unmarshal(e.RawRequest, &n) == nil && n.Status.Allocation == "kept":
				claim, claimed = &e, n
			case e.ObjectRef.Resource == "allocations" && e.ObjectRef.Name == "kept" &&
				json.Unmarshal(e.RawRequest, &al) == nil && al.Status.State == nodusv1.AllocationStateActive:
				status, settled = &e, al
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if claim == nil || status == nil {
		t.Fatalf("the controller's writes are not in the audit log: claim %v, status %v", claim != nil, status != nil)
	}
	if claim.AuditID == "" || claim.AuditID == status.AuditID {
		t.Errorf("the writes' audit ids: %q and %q", claim.AuditID, status.AuditID)
	}
	if claim.User.Username != "system:apiserver" || claim.Verb != "update" || claim.ResponseStatus.Code != 200 ||
		claimed.Status.AllocationUID != a.UID || !strings.Contains(claim.RequestURI, "fieldManager=nodus-allocation-controller") {
		t.Errorf("the claim's audit event: %+v (claim %+v)", claim, claimed.Status)
	}
	if status.User.Username != "system:apiserver" || status.ResponseStatus.Code != 200 || settled.Status.Node != "kept-0" {
		t.Errorf("the allocation status's audit event: %+v (status %+v)", status, settled.Status)
	}
}

// controllerFields are the allocation controller's status fields in
// entries, as JSON.
func controllerFields(entries []metav1.ManagedFieldsEntry) string {
	for _, e := range entries {
		if e.Manager == "nodus-allocation-controller" && e.Subresource == "status" && e.Operation == metav1.ManagedFieldsOperationUpdate && e.FieldsV1 != nil {
			return string(e.FieldsV1.Raw)
		}
	}
	return ""
}
