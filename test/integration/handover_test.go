package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestOneLiveReservationPerNode races 20 reservations, of two projects, for
// one node: whatever the admission check lets through, exactly one becomes
// active and the node's claim names it; the others wait, pending, with the
// registered reason.
func TestOneLiveReservationPerNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "contested")
	now := time.Now()
	var wg sync.WaitGroup
	created := make(chan string, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			project := "acme"
			if i%2 == 1 {
				project = "other"
			}
			name := fmt.Sprintf("race-%02d", i)
			err := testfleet.Reserve(context.Background(), s.Client, name, project, nodusv1.ReservationPlacement{Node: "contested"}, now.Add(-time.Hour), now.Add(time.Hour))
			switch {
			case err == nil:
				created <- name
			case apierrors.ReasonForError(err) != apierror.ReasonNodeReserved:
				t.Errorf("create %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	close(created)
	var names []string
	for n := range created {
		names = append(names, n)
	}
	if len(names) == 0 {
		t.Fatal("no reservation was accepted")
	}
	var active string
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		active = ""
		for _, name := range names {
			r, err := s.Client.NodusV1().Reservations().Get(c, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			placed := meta.FindStatusCondition(r.Status.Conditions, "Placed")
			switch {
			case r.Status.State == nodusv1.ReservationStateActive && active != "":
				t.Fatalf("%s and %s are both active on one node", active, name)
			case r.Status.State == nodusv1.ReservationStateActive:
				active = name
			case r.Status.State != nodusv1.ReservationStatePending || placed == nil || placed.Reason != string(apierror.ReasonNodeReserved):
				return false, nil // still settling
			}
		}
		return active != "", nil
	}); err != nil {
		t.Fatalf("the race did not settle on one active reservation (active %q): %v", active, err)
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "contested", metav1.GetOptions{})
	if err != nil || n.Status.Reservation != active || n.Status.ProvisionState != nodusv1.ProvisionStateActive {
		t.Errorf("the node's claim: %+v, want %s (%v)", n.Status, active, err)
	}
	t.Logf("%d of 20 created (the rest refused with NodeReserved), %s active", len(names), active)
}

// TestANodeAnAllocationHoldsIsNotReserved: an Ironic client's allocation
// (here a backfill) holds a node; a reservation placed on that node by
// name must not claim it too and give a tenant a machine the allocation's
// owner believes its own. It waits, pending, with the registered reason
// naming the allocation, and activates once the allocation is deleted.
func TestANodeAnAllocationHoldsIsNotReserved(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "allocated")
	c := s.Client.NodusV1()
	backfill(t, s, "ironic-claim", "allocated")
	now := time.Now()
	f.reserve(t, "by-name", nodusv1.ReservationPlacement{Node: "allocated"}, now.Add(-time.Hour), now.Add(time.Hour))
	r := waitingWith(t, s, "by-name", apierror.ReasonNodeAllocated)
	if placed := meta.FindStatusCondition(r.Status.Conditions, "Placed"); !strings.Contains(placed.Message, "ironic-claim") {
		t.Errorf("the reservation's Placed condition does not name the allocation: %+v", placed)
	}
	if n := waitNode(t, s, "allocated", func(*nodusv1.Node) bool { return true }); n.Status.Reservation != "" || n.Status.Allocation != "ironic-claim" {
		t.Errorf("the node's claims: reservation %q, allocation %q", n.Status.Reservation, n.Status.Allocation)
	}
	if err := c.Allocations().Delete(ctx(t), "ironic-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "by-name", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
}

// TestANodeThatOwesACleaningIsNotDeleted: a node's cleaning obligation
// lives on its Node (the claim, the cleaning request). Deleting that Node
// and enrolling the same machine again made a fresh Node, available at its
// first heartbeat, with the former tenant's cron jobs, files and account
// still on it. A node held by a reservation, being cleaned, or whose
// cleaning failed is therefore not deleted (409 NodeOwesCleaning), unless
// the operator says the machine will not come back as it is
// (nodus.dev/delete-uncleaned); a node that owes nothing is deleted.
func TestANodeThatOwesACleaningIsNotDeleted(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	nodes := s.Client.NodusV1().Nodes()
	refused := func(name, what string) {
		t.Helper()
		err := nodes.Delete(ctx(t), name, metav1.DeleteOptions{})
		if apierrors.ReasonForError(err) != apierror.ReasonNodeOwesCleaning || !strings.Contains(err.Error(), "nodus.dev/delete-uncleaned") {
			t.Errorf("deleting a node %s: %v, want NodeOwesCleaning", what, err)
		}
		if _, err := nodes.Get(ctx(t), name, metav1.GetOptions{}); err != nil {
			t.Errorf("the node %s is gone: %v", what, err)
		}
	}
	now := time.Now()
	f.host(t, "held", now.Add(-time.Hour), now.Add(time.Hour))
	refused("held", "a reservation holds")
	for what, st := range map[string]nodusv1.NodeStatus{
		"being cleaned": {ProvisionState: nodusv1.ProvisionStateCleaning,
			Cleaning: &nodusv1.NodeCleaning{Request: 1, Reservation: "gone", Phase: nodusv1.CleaningPending}},
		"whose cleaning failed": {ProvisionState: nodusv1.ProvisionStateAvailable,
			Cleaning: &nodusv1.NodeCleaning{Request: 1, Reservation: "gone", Phase: nodusv1.CleaningFailed}},
	} {
		name := strings.ReplaceAll(what, " ", "-")
		f.node(t, name)
		forgeNodeInEtcd(t, s, name, func(n *nodusv1.Node) { n.Status.ProvisionState, n.Status.Cleaning = st.ProvisionState, st.Cleaning })
		waitNode(t, s, name, func(n *nodusv1.Node) bool { return n.Status.Cleaning != nil })
		refused(name, what)
	}
	// The operator's word: the machine is re-imaged before it comes back.
	annotated, err := nodes.Get(ctx(t), "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	annotated.Annotations = map[string]string{nodusv1.AnnotationDeleteUncleaned: "true"}
	if _, err := nodes.Update(ctx(t), annotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx(t), "held", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting a node the operator marked: %v", err)
	}
	f.node(t, "clean")
	if err := nodes.Delete(ctx(t), "clean", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting a node that owes nothing: %v", err)
	}
}

// TestHandoverWaitsForCleaningEvidence follows one node from tenant to
// tenant: the next reservation never activates before the node's current
// agent reports the cleaning, a failed cleaning puts the node in
// maintenance, and an operator cleans again.
func TestHandoverWaitsForCleaningEvidence(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "h1", now.Add(-time.Hour), now.Add(time.Hour))
	next := func() *nodusv1.Reservation {
		return testfleet.Reservation("next", "other", nodusv1.ReservationPlacement{Node: "h1"}, now.Add(-time.Hour), now.Add(time.Hour))
	}
	if _, err := c.Reservations().Create(ctx(t), next(), metav1.CreateOptions{}); apierrors.ReasonForError(err) != apierror.ReasonNodeReserved {
		t.Fatalf("a reservation for an active tenant's node: %v", err)
	}
	// Its fix is the cleaning's, not the reason's for a placement.
	if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/nodes/h1/clean", "application/json", strings.NewReader(`{}`)); r.code != http.StatusConflict ||
		envelopeOf(t, r).Reason != apierror.ReasonNodeReserved || !strings.Contains(envelopeOf(t, r).Fix, "cleaned by itself when its reservation's access ends") {
		t.Errorf("cleaning a reserved node: %d %s", r.code, r.body)
	}
	if r := f.release(t, f.admin, "h1", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	// The holder is on its way out: the next tenant may queue for the node.
	if _, err := c.Reservations().Create(ctx(t), next(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := placedReason(t, f, "next", apierror.ReasonNodeReserved); got != string(apierror.ReasonNodeReserved) {
		t.Fatalf("next waits with %q while h1 releases", got)
	}
	if r := f.heartbeat(t, "h1", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("h1", 2, 0, 0)}}); r.code != 200 {
		t.Fatalf("drain heartbeat: %d %s", r.code, r.body)
	}
	cleaning := waitNode(t, s, "h1", func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil && n.Status.Cleaning.Request == 1
	})
	if cl := cleaning.Status.Cleaning; cleaning.Status.Reservation != "" || cl.Reservation != "h1" || cl.Epoch != 2 ||
		cl.Phase != nodusv1.CleaningPending || strings.Join(cl.Users, ",") != "ubuntu" {
		t.Errorf("the cleaning request: %+v", cleaning.Status)
	}
	if got := placedReason(t, f, "next", apierror.ReasonNodeCleaning); got != string(apierror.ReasonNodeCleaning) {
		t.Fatalf("next waits with %q while h1 is cleaned", got)
	}

	beat := func(gen int64, ev nodusv1.CleaningEvidence) response {
		return f.heartbeat(t, "h1", nodusv1.NodeHeartbeat{AgentGeneration: gen, Cleaning: &ev})
	}
	// Evidence that must count for nothing.
	if r := beat(0, nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 2, Succeeded: true}); r.code != http.StatusConflict {
		t.Errorf("an old agent generation's cleaning: %d %s", r.code, r.body)
	}
	for what, ev := range map[string]nodusv1.CleaningEvidence{
		"another request":            {Request: 2, AppliedEpoch: 2, Succeeded: true},
		"before the final epoch":     {Request: 1, AppliedEpoch: 1, Succeeded: true},
		"a report too big to record": {Request: 1, AppliedEpoch: 2, Succeeded: true, CommandOutput: strings.Repeat("x", 5000)},
	} {
		if r := beat(1, ev); r.code != 200 && r.code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s", what, r.code, r.body)
		}
	}
	stillCleaning(t, s, f, "h1")

	// A failed cleaning: maintenance with the reason, never available.
	code := int32(3)
	if r := beat(1, nodusv1.CleaningEvidence{Request: 1, AppliedEpoch: 2, Message: "the clean command exited 3", CommandExitCode: &code,
		CommandOutput: "wiping /scratch: device busy\n"}); r.code != 200 {
		t.Fatalf("failed cleaning: %d %s", r.code, r.body)
	}
	failed := waitNode(t, s, "h1", func(n *nodusv1.Node) bool { return n.Spec.Maintenance })
	if cl := failed.Status.Cleaning; failed.Status.ProvisionState != nodusv1.ProvisionStateCleaning || cl.Phase != nodusv1.CleaningFailed ||
		*cl.CommandExitCode != 3 || !strings.Contains(failed.Spec.MaintenanceReason, "cleaning request 1 failed: the clean command exited 3") {
		t.Errorf("after a failed cleaning: %+v %+v", failed.Spec, failed.Status)
	}
	stillCleaning(t, s, f, "h1")

	// The operator fixes it and cleans again.
	r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/nodes/h1/clean", "application/json", strings.NewReader(`{}`))
	var again nodusv1.Node
	if r.code != 201 && r.code != 200 || json.Unmarshal(r.body, &again) != nil || again.Status.Cleaning.Request != 2 ||
		again.Status.Cleaning.Phase != nodusv1.CleaningPending || again.Status.Cleaning.Epoch != 2 {
		t.Fatalf("clean again: %d %s", r.code, r.body)
	}
	if r := beat(1, nodusv1.CleaningEvidence{Request: 2, AppliedEpoch: 2, Succeeded: true, Steps: []string{"reset /home/ubuntu"}}); r.code != 200 {
		t.Fatalf("cleaning evidence: %d %s", r.code, r.body)
	}
	waitNode(t, s, "h1", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable })
	if got := placedReason(t, f, "next", apierror.ReasonNodeInMaintenance); got != string(apierror.ReasonNodeInMaintenance) {
		t.Fatalf("next waits with %q while h1 is in maintenance", got)
	}
	setMaintenance(t, s, "h1", false)
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "next", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateActive && r.Status.Epoch == 1, nil
	}); err != nil {
		t.Fatal("the next tenant never became active on the cleaned node")
	}
	if n := waitNode(t, s, "h1", func(n *nodusv1.Node) bool { return n.Status.Reservation == "next" }); n.Status.ProvisionState != nodusv1.ProvisionStateActive {
		t.Errorf("the next tenant's node: %+v", n.Status)
	}

	// The former tenant's ReservedHost shows nothing of the next tenant's
	// time on the node: not its heartbeats, epoch or inventory.
	before, err := c.ReservedHosts("acme").Get(ctx(t), "h1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Nodes().Get(ctx(t), "h1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Inventory.DiskGiB = 1234
		_, err = c.Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r := f.heartbeat(t, "h1", nodusv1.NodeHeartbeat{AgentGeneration: 1, Reservations: []nodusv1.ReservationEvidence{evidence("next", 1, 0, 0)}}); r.code != 200 {
		t.Fatalf("the next tenant's heartbeat: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		h, err := c.ReservedHosts("other").Get(cx, "next", metav1.GetOptions{})
		return err == nil && h.Status.Inventory.DiskGiB == 1234, nil
	}); err != nil {
		t.Fatal("the next tenant's ReservedHost never showed the node's inventory")
	}
	after, err := c.ReservedHosts("acme").Get(ctx(t), "h1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Inventory.DiskGiB != before.Status.Inventory.DiskGiB || !after.Status.LastHeartbeatTime.Equal(before.Status.LastHeartbeatTime) {
		t.Errorf("the former tenant's ReservedHost follows the node under the next tenant: inventory %+v, last heartbeat %v (was %+v, %v)",
			after.Status.Inventory, after.Status.LastHeartbeatTime, before.Status.Inventory, before.Status.LastHeartbeatTime)
	}
	if c := meta.FindStatusCondition(after.Status.Conditions, nodusv1.ReservedHostConditionConnected); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "AccessEnded" {
		t.Errorf("the former tenant's host, handed back: %+v", c)
	}
}

// stillCleaning checks, for a while, that node stays cleaning and the
// reservation "next" waiting for it stays pending.
func stillCleaning(t *testing.T, s *testserver.Server, f *fleet, node string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		n, err := s.Client.NodusV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
		if err != nil || n.Status.ProvisionState != nodusv1.ProvisionStateCleaning {
			t.Fatalf("node %s left cleaning without evidence: %+v %v", node, n.Status, err)
		}
		if r := f.reservation(t, "next"); r.Status.State != nodusv1.ReservationStatePending {
			t.Fatalf("next activated before the cleaning evidence: %+v", r.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEveryWayOutHandsTheNodeOver: a deleted reservation and a reassigned
// one let their nodes go to cleaning; allocations never take a reserved or
// cleaning node by class, and a backfill of a reserved node fails.
func TestEveryWayOutHandsTheNodeOver(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "gone", now.Add(-time.Hour), now.Add(time.Hour))
	// A member removed: the epoch rises to 2. The cleaning request names
	// the deleted reservation's final epoch, which the agent retires it at:
	// the rise, reaching the agent after the cleaning request, must not
	// grant the reservation again.
	p, err := c.Projects().Get(ctx(t), "acme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Members = slices.DeleteFunc(p.Spec.Members, func(m nodusv1.ProjectMember) bool { return m.Name == "mary" })
	if _, err := c.Projects().Update(ctx(t), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) {
		return f.reservation(t, "gone").Status.Epoch == 2, nil
	}); err != nil {
		t.Fatal("removing a member never raised the epoch")
	}
	if err := c.Reservations().Delete(ctx(t), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n := waitNode(t, s, "gone", func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning })
	if cl := n.Status.Cleaning; n.Status.Reservation != "" || cl.Reservation != "gone" || cl.Epoch != 2 || strings.Join(cl.Users, ",") != "ubuntu" {
		t.Errorf("the deleted reservation's node: %+v", n.Status)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		_, err := c.ReservedHosts("acme").Get(cx, "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Error("the deleted reservation's ReservedHost stayed")
	}

	// Reassignment: a class-placed reservation whose allocation the operator
	// takes away (maintenance first) gets a new one on another node, which it
	// claims; the old node is handed over.
	for _, name := range []string{"class-1", "class-2"} {
		f.node(t, name)
		if r := f.heartbeat(t, name, nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
			t.Fatalf("heartbeat %s: %d %s", name, r.code, r.body)
		}
	}
	f.reserve(t, "mover", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "mover", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	first := f.reservation(t, "mover").Status.Node
	setMaintenance(t, s, first, true)
	if err := c.Allocations().Delete(ctx(t), "reservation-mover", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var moved *nodusv1.Reservation
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		moved = f.reservation(t, "mover")
		return moved.Status.Node != first && moved.Status.Node != "", nil
	}); err != nil {
		t.Fatalf("the reservation never moved off %s: %+v", first, moved.Status)
	}
	if moved.Status.Epoch != 2 || moved.Status.State != nodusv1.ReservationStateActive {
		t.Errorf("the reassigned reservation: %+v", moved.Status)
	}
	waitNode(t, s, moved.Status.Node, func(n *nodusv1.Node) bool { return n.Status.Reservation == "mover" })
	old := waitNode(t, s, first, func(n *nodusv1.Node) bool { return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning })
	if old.Status.Reservation != "" || old.Status.Cleaning.Reservation != "mover" || old.Status.Cleaning.Epoch != 2 {
		t.Errorf("the node a reassignment left: %+v", old.Status)
	}

	// Allocations: a backfill of a reserved or cleaning node fails; class
	// placement never takes a reserved or cleaning node.
	setMaintenance(t, s, first, false)
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "backfill"},
		Spec: nodusv1.AllocationSpec{Node: "gone"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := waitAllocation(t, s, "backfill"); a.Status.State != nodusv1.AllocationStateError || !strings.Contains(a.Status.LastError, "being cleaned") {
		t.Errorf("backfill of a cleaning node: %+v", a.Status)
	}
	if n, err := c.Nodes().Get(ctx(t), "gone", metav1.GetOptions{}); err != nil || n.Status.Allocation != "" {
		t.Errorf("a failed backfill of the cleaning node: %v %+v", err, n.Status)
	}
	f.host(t, "holder", now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "backfill-held"},
		Spec: nodusv1.AllocationSpec{Node: "holder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := waitAllocation(t, s, "backfill-held")
	if a.Status.State != nodusv1.AllocationStateError || !strings.Contains(a.Status.LastError, "held by reservation holder") {
		t.Errorf("backfill of a reserved node: %+v", a.Status)
	}
	// Every node of the class is now reserved (holder, the mover's) or cleaning (the first).
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "by-class"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if a := waitAllocation(t, s, "by-class"); a.Status.State != nodusv1.AllocationStateError {
		t.Errorf("a class allocation took a reserved or cleaning node: %+v", a.Status)
	}
}

// waitAllocation waits until allocation name is placed or failed.
func waitAllocation(t *testing.T, s *testserver.Server, name string) *nodusv1.Allocation {
	t.Helper()
	return waitAllocationUntil(t, s, name, func(a *nodusv1.Allocation) bool {
		return a.Status.State != "" && a.Status.State != nodusv1.AllocationStateAllocating
	})
}

func setMaintenance(t *testing.T, s *testserver.Server, name string, on bool) {
	t.Helper()
	c := s.Client.NodusV1()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Nodes().Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Maintenance = on
		if !on {
			n.Spec.MaintenanceReason = ""
		}
		_, err = c.Nodes().Update(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestACertificateOpensOnlyItsOwnReservation: a reservation deleted and
// made again under the same name, for another project, starts at the same
// epoch; the certificate issued to the first tenant must not name the
// principal the second one's host lets in.
func TestACertificateOpensOnlyItsOwnReservation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "gpu-7", now.Add(-time.Hour), now.Add(time.Hour))
	first := certificateFor(t, f.admin, "acme", "gpu-7")

	if err := c.Reservations().Delete(ctx(t), "gpu-7", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.node(t, "n2")
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		err := testfleet.Reserve(cx, s.Client, "gpu-7", "other", nodusv1.ReservationPlacement{Node: "n2"}, now.Add(-time.Hour), now.Add(time.Hour))
		return err == nil, nil // the name is free once the deletion is done
	}); err != nil {
		t.Fatal("the name gpu-7 was never free again")
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		h, err := c.ReservedHosts("other").Get(cx, "gpu-7", metav1.GetOptions{})
		return err == nil && h.Status.Reservation.State == nodusv1.ReservationStateActive, nil
	}); err != nil {
		t.Fatal("other's gpu-7 never became active")
	}
	second := certificateFor(t, f.outsider, "other", "gpu-7")
	if first.Epoch != second.Epoch {
		t.Logf("epochs %d and %d: the names alone would not collide here", first.Epoch, second.Epoch)
	}
	if first.Principal == second.Principal {
		t.Errorf("acme's certificate of the deleted gpu-7 names %q, the principal other's gpu-7 lets in", first.Principal)
	}
}

// certificateFor asks for an SSH certificate of a fresh key as cfg.
func certificateFor(t *testing.T, cfg *rest.Config, project, host string) nodusv1.ReservedHostSSHCertificate {
	t.Helper()
	r := do(t, cfg, "POST", "/apis/nodus.dev/v1/namespaces/"+project+"/reservedhosts/"+host+"/ssh-certificate", "application/json",
		strings.NewReader(sshCertificateRequest(t)))
	var answer nodusv1.ReservedHostSSHCertificate
	if r.code != 200 || json.Unmarshal(r.body, &answer) != nil || answer.Principal == "" {
		t.Fatalf("ssh-certificate of %s/%s: %d %s", project, host, r.code, r.body)
	}
	return answer
}

// TestANameMadeAgainInheritsNoNode: a node's claim names its reservation.
// A reservation deleted and at once made again under its name, for another
// project and the same node, must not find the node claimed for it: the
// node is cleaned of the first tenant before the second one's access.
func TestANameMadeAgainInheritsNoNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "gpu-7", now.Add(-time.Hour), now.Add(time.Hour))
	if err := c.Reservations().Delete(ctx(t), "gpu-7", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Reserve(ctx(t), s.Client, "gpu-7", "other", nodusv1.ReservationPlacement{Node: "gpu-7"}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil &&
		apierrors.ReasonForError(err) != apierror.ReasonNodeReserved {
		t.Fatal(err)
	} else if err != nil {
		t.Skip("the node was still reserved when the name was made again: nothing to inherit")
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		r := f.reservation(t, "gpu-7")
		n, err := c.Nodes().Get(ctx(t), "gpu-7", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.State == nodusv1.ReservationStateActive {
			t.Fatalf("other's gpu-7 became active on a node no one cleaned of acme: %+v; node %+v", r.Status, n.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitNode(t, s, "gpu-7", func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil && n.Status.Cleaning.Reservation == "gpu-7"
	})
}

// TestADeletedClassReservationFreesItsNode: a reservation placed by
// resource class holds its node through an allocation of its own. Deleted
// (by an operator, or with its project), it must let the allocation go
// too: the node, once cleaned, serves the next class placement.
func TestADeletedClassReservationFreesItsNode(t *testing.T) {
	s, f, cleaning := classNodeBeingCleaned(t)
	c := s.Client.NodusV1()
	now := time.Now()
	if r := f.heartbeat(t, "only", nodusv1.NodeHeartbeat{AgentGeneration: 1, Cleaning: &nodusv1.CleaningEvidence{
		Request: cleaning.Status.Cleaning.Request, AppliedEpoch: cleaning.Status.Cleaning.Epoch, Succeeded: true}}); r.code != 200 {
		t.Fatalf("cleaning evidence: %d %s", r.code, r.body)
	}
	f.reserve(t, "second", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "second", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateActive, nil
	}); err != nil {
		n, _ := c.Nodes().Get(ctx(t), "only", metav1.GetOptions{})
		_, allocErr := c.Allocations().Get(ctx(t), "reservation-first", metav1.GetOptions{})
		t.Fatalf("the next class reservation never got the cleaned node: node %+v; the deleted one's allocation: %v", n.Status, allocErr)
	}
}

// TestAClassReservationTakesNoAllocationItDidNotMake: a reservation placed
// by class makes the allocation reservation-NAME and uses it. One of that
// name made by someone else (an Ironic client, an operator) is not its own:
// adopting it would give the tenant the node of another's allocation, and
// the reservation's end would delete that allocation. The reservation
// waits, saying why, and leaves it alone; once it is gone, it makes its own.
func TestAClassReservationTakesNoAllocationItDidNotMake(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "class-node")
	c := s.Client.NodusV1()
	if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "reservation-by-class"},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs := waitAllocation(t, s, "reservation-by-class")
	if theirs.Status.State != nodusv1.AllocationStateActive {
		t.Fatalf("the other allocation: %+v", theirs.Status)
	}
	now := time.Now()
	f.reserve(t, "by-class", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	r := waitingWith(t, s, "by-class", apierror.ReasonAllocationNameTaken)
	if n := waitNode(t, s, "class-node", func(*nodusv1.Node) bool { return true }); n.Status.Reservation != "" {
		t.Errorf("the other allocation's node was claimed by the reservation: %+v", n.Status)
	}
	if a, err := c.Allocations().Get(ctx(t), "reservation-by-class", metav1.GetOptions{}); err != nil || a.UID != theirs.UID {
		t.Errorf("the other allocation: %v %v", err, a)
	}
	if err := c.Allocations().Delete(ctx(t), "reservation-by-class", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "by-class", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if a, err := c.Allocations().Get(ctx(t), "reservation-by-class", metav1.GetOptions{}); err != nil || a.UID == theirs.UID || a.Labels["nodus.dev/reservation-uid"] != string(r.UID) {
		t.Errorf("the reservation's own allocation: %v %+v", err, a)
	}
}

// TestAnEndedReservationLeavesALaterAllocationOfItsNameAlone: a
// reservation placed on a named allocation lets that allocation go when it
// ends. An allocation made later under the same name is someone else's:
// the ended reservation, which stays, must not delete it.
func TestAnEndedReservationLeavesALaterAllocationOfItsNameAlone(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	for _, n := range []string{"n1", "n2"} {
		f.node(t, n)
		if r := f.heartbeat(t, n, nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
			t.Fatalf("heartbeat: %d %s", r.code, r.body)
		}
	}
	allocate := func() *nodusv1.Allocation {
		t.Helper()
		if _, err := c.Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
			Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return waitAllocation(t, s, "web-1")
	}
	first := allocate()
	f.reserve(t, "web", nodusv1.ReservationPlacement{Allocation: "web-1"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "web", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if r := f.release(t, f.admin, "web", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	if r := f.heartbeat(t, first.Status.Node, nodusv1.NodeHeartbeat{AgentGeneration: 1,
		Reservations: []nodusv1.ReservationEvidence{evidence("web", f.reservation(t, "web").Status.Epoch, 0, 0)}}); r.code != 200 {
		t.Fatalf("drain heartbeat: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		_, err := c.Allocations().Get(cx, "web-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the released reservation never let its allocation go")
	}
	// Creation times have seconds: one made in the very second of the
	// release cannot be told from the reservation's own.
	time.Sleep(1100 * time.Millisecond)
	second := allocate()
	time.Sleep(2 * time.Second)
	if a, err := c.Allocations().Get(ctx(t), "web-1", metav1.GetOptions{}); err != nil || a.UID != second.UID {
		t.Errorf("the new allocation web-1 was deleted by the released reservation that once used the name: %v", err)
	}
}

// sshCertificateRequest is an ssh-certificate request body for a fresh key.
func sshCertificateRequest(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"publicKey": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))})
	return string(body)
}

// TestAClassReservationWaitsForItsNodeToBeFree: a reservation placed by
// resource class while every node of the class is busy waits for one: its
// allocation must not fail for good at its first look, as an Ironic
// client's allocation does, or the reservation never activates. (CI saw
// TestADeletedClassReservationFreesItsNode fail so, once, under load: the
// next reservation's allocation looked before the cleaned node was free.)
// While it waits it says why as things are now, not as they were at its
// first look (CI saw "already allocated or in use" stay while the node was
// cleaned).
func TestAClassReservationWaitsForItsNodeToBeFree(t *testing.T) {
	s, f := classNodeInUse(t)
	c := s.Client.NodusV1()
	now := time.Now()
	f.reserve(t, "second", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	waitsSaying := func(what, why string) {
		t.Helper()
		var waiting nodusv1.Allocation
		if err := testfleet.Eventually(ctx(t), 10*time.Second, func(cx context.Context) (bool, error) {
			a, err := c.Allocations().Get(cx, "reservation-second", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			waiting = *a
			return strings.Contains(a.Status.LastError, why), nil
		}); err != nil || waiting.Status.State != nodusv1.AllocationStateAllocating {
			t.Fatalf("a reservation's allocation while the only node is %s: %+v, want allocating, saying %q", what, waiting.Status, why)
		}
	}
	waitsSaying("in use", "already allocated or in use")
	cleaning := cleanedAfterDeletion(t, s, "first")
	waitsSaying("cleaned", "being cleaned")
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "second", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		placed := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return placed != nil && strings.Contains(placed.Message, "being cleaned"), nil
	}); err != nil {
		t.Error("the waiting reservation's Placed condition never said why its allocation waits")
	}
	if r := f.heartbeat(t, "only", nodusv1.NodeHeartbeat{AgentGeneration: 1, Cleaning: &nodusv1.CleaningEvidence{
		Request: cleaning.Status.Cleaning.Request, AppliedEpoch: cleaning.Status.Cleaning.Epoch, Succeeded: true}}); r.code != 200 {
		t.Fatalf("cleaning evidence: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 20*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "second", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateActive && r.Status.Node == "only", nil
	}); err != nil {
		a, _ := c.Allocations().Get(ctx(t), "reservation-second", metav1.GetOptions{})
		t.Fatalf("the class reservation never got the node once it was free: its allocation %+v", a.Status)
	}
}

// classNodeBeingCleaned is a fleet whose only ready node of its class,
// "only", held a class-placed reservation "first" that was deleted: the
// node as it is being cleaned after it.
func classNodeBeingCleaned(t *testing.T) (*testserver.Server, *fleet, *nodusv1.Node) {
	t.Helper()
	s, f := classNodeInUse(t)
	return s, f, cleanedAfterDeletion(t, s, "first")
}

// classNodeInUse is a fleet whose only ready node of its class, "only",
// holds the active class-placed reservation "first".
func classNodeInUse(t *testing.T) (*testserver.Server, *fleet) {
	t.Helper()
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.node(t, "only")
	if r := f.heartbeat(t, "only", nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	f.reserve(t, "first", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "first", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	return s, f
}

// cleanedAfterDeletion deletes reservation name, active on node "only", and
// returns the node once it is being cleaned after it.
func cleanedAfterDeletion(t *testing.T, s *testserver.Server, name string) *nodusv1.Node {
	t.Helper()
	if err := s.Client.NodusV1().Reservations().Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitNode(t, s, "only", func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil && n.Status.Cleaning.Reservation == name
	})
}

// waitingWith waits until reservation name is pending with Placed reason
// reason, and fails the test if it becomes anything else.
func waitingWith(t *testing.T, s *testserver.Server, name string, reason metav1.StatusReason) *nodusv1.Reservation {
	t.Helper()
	var r *nodusv1.Reservation
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		var err error
		r, err = s.Client.NodusV1().Reservations().Get(cx, name, metav1.GetOptions{})
		if err != nil || r.Status.State != nodusv1.ReservationStatePending {
			return err == nil && r.Status.State != "", err
		}
		placed := meta.FindStatusCondition(r.Status.Conditions, "Placed")
		return placed != nil && placed.Reason == string(reason), nil
	}); err != nil || r.Status.State != nodusv1.ReservationStatePending {
		t.Fatalf("reservation %s, to wait with %s: %v %+v", name, reason, err, r.Status)
	}
	return r
}

// backfill makes allocation name of node, as an Ironic client's backfill,
// and waits until it is active.
func backfill(t *testing.T, s *testserver.Server, name, node string) *nodusv1.Allocation {
	t.Helper()
	if _, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.AllocationSpec{Node: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := waitAllocation(t, s, name)
	if a.Status.State != nodusv1.AllocationStateActive {
		t.Fatalf("the backfill of %s: %+v", node, a.Status)
	}
	return a
}

// TestAReleasingReservationMakesNoAllocation: a class reservation makes
// its allocation reservation-NAME while it may give access. Released and
// still draining, it made it again when an operator deleted it (its node
// in maintenance, so the delete was allowed): the new allocation took a
// free node, and outlived the release (a later allocation of the name is
// left alone), holding that node for no one.
func TestAReleasingReservationMakesNoAllocation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	readyNodes(t, f, "class-a", "class-b")
	c := s.Client.NodusV1()
	now := time.Now()
	f.reserve(t, "draining", nodusv1.ReservationPlacement{ResourceClass: "gpu-h100x8"}, now.Add(-time.Hour), now.Add(time.Hour))
	h := f.waitHost(t, "draining", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	if r := f.release(t, f.admin, "draining", fmt.Sprintf(`{"agreed":true,"epoch":%d}`, h.Status.Reservation.Epoch), ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	node := f.reservation(t, "draining").Status.Node
	if r := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/nodes/"+node, "application/merge-patch+json",
		strings.NewReader(`{"spec":{"maintenance":true,"maintenanceReason":"rma"}}`)); r.code != http.StatusOK {
		t.Fatalf("maintenance: %d %s", r.code, r.body)
	}
	if err := c.Allocations().Delete(ctx(t), "reservation-draining", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if a, err := c.Allocations().Get(ctx(t), "reservation-draining", metav1.GetOptions{}); err == nil {
		t.Errorf("the releasing reservation made its allocation again: %+v", a.Status)
	}
	if r := f.reservation(t, "draining"); r.Status.State != nodusv1.ReservationStateReleasing {
		t.Errorf("the reservation: %s, want still releasing (nothing drained it)", r.Status.State)
	}
}
