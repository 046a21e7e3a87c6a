package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestADeleteLeavesNoFinalizerNothingRemoves deletes with kubectl's
// --cascade=orphan and --cascade=foreground. Nodus runs no garbage
// collector: the generic store would add the orphan or foregroundDeletion
// finalizer that only one removes, and the object would stay, deleting for
// ever: an execution a borrower deleted could still be placed and run, and
// its project's deletion would wait for it.
func TestADeleteLeavesNoFinalizerNothingRemoves(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1()
	ctx := ctx(t)
	if _, err := c.Projects().Create(ctx, project("borrower", nodusv1.ProjectMember{Name: "bea", Role: nodusv1.ProjectRoleMember}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lending"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 4}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	borrower, err := versioned.NewForConfig(tokenFor(t, s, "bea"))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground} {
		created, err := borrower.NodusV1().Executions("borrower").Create(ctx, &nodusv1.Execution{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "job-"},
			Spec:       nodusv1.ExecutionSpec{Pool: "lending", Command: []string{"sleep", "1"}, GPUs: 1, MaxRuntimeSeconds: 60},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := borrower.NodusV1().Executions("borrower").Delete(ctx, created.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatalf("the borrower deletes its pending execution (%s): %v", policy, err)
		}
		if left, err := c.Executions("borrower").Get(ctx, created.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("an execution deleted with propagation %s is still there: %v, finalizers %v", policy, err, left.Finalizers)
		}
	}
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground} {
		name := "p-" + strings.ToLower(string(policy))
		if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Pools().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		if left, err := c.Pools().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a pool deleted with propagation %s is still there: %v, finalizers %v", policy, err, left.Finalizers)
		}
	}
}

// hold puts finalizer on the object at path (an operator's tools may), and
// takes it off when the test ends: a delete then leaves the object, being
// deleted, until the finalizer goes.
func hold(t *testing.T, s *testserver.Server, path string) {
	t.Helper()
	if r := do(t, s.Config, "PATCH", path, "application/merge-patch+json", strings.NewReader(`{"metadata":{"finalizers":["example.com/hold"]}}`)); r.code != http.StatusOK {
		t.Fatalf("adding a finalizer to %s: %d %s", path, r.code, r.body)
	}
	t.Cleanup(func() {
		_ = do(t, s.Config, "PATCH", path, "application/merge-patch+json", strings.NewReader(`{"metadata":{"finalizers":null}}`))
	})
}

// TestADeletedReservationHeldByAFinalizerEndsAccess: deleting a reservation
// is a way its access ends (handover.md). A finalizer that keeps the object
// kept the access too: the reservation stayed active at its epoch, its
// members got SSH certificates, and one not begun yet would have begun at
// its start. A deletion ends it as its term's end does, whatever holds the
// object.
func TestADeletedReservationHeldByAFinalizerEndsAccess(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "gpu-1", now.Add(-time.Hour), now.Add(time.Hour))
	certificateFor(t, f.member, "acme", "gpu-1")
	epoch := f.reservation(t, "gpu-1").Status.Epoch
	hold(t, s, "/apis/nodus.dev/v1/reservations/gpu-1")
	if err := c.Reservations().Delete(ctx(t), "gpu-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h := f.waitHost(t, "gpu-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State != nodusv1.ReservationStateActive
	})
	if h.Status.Reservation.State != nodusv1.ReservationStateEnding || h.Status.Reservation.Epoch <= epoch {
		t.Errorf("the deleted reservation's host: %s at epoch %d, want ending past epoch %d", h.Status.Reservation.State, h.Status.Reservation.Epoch, epoch)
	}
	r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/gpu-1/ssh-certificate", "application/json", strings.NewReader(sshCertificateRequest(t)))
	if r.code != http.StatusConflict || envelopeOf(t, r).Reason != apierror.ReasonTermEnded {
		t.Errorf("an SSH certificate of a deleted reservation: %d %s, want 409 TermEnded", r.code, r.body)
	}

	// One whose term has not begun never begins.
	f.node(t, "gpu-2")
	f.reserve(t, "gpu-2", nodusv1.ReservationPlacement{Node: "gpu-2"}, now.Add(3*time.Second), now.Add(time.Hour))
	hold(t, s, "/apis/nodus.dev/v1/reservations/gpu-2")
	if err := c.Reservations().Delete(ctx(t), "gpu-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "gpu-2", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateEnded, err
	}); err != nil {
		t.Errorf("a deleted reservation not begun yet: %v; %+v", err, f.reservation(t, "gpu-2").Status)
	}
	time.Sleep(time.Until(now.Add(4 * time.Second)))
	if r := f.reservation(t, "gpu-2"); r.Status.State != nodusv1.ReservationStateEnded || r.Status.Epoch != 0 {
		t.Errorf("a deleted reservation after its start: %s at epoch %d, want ended at 0", r.Status.State, r.Status.Epoch)
	}
}

// TestADeletedEnrollmentTokenHeldByAFinalizerEnrollsNothing: an operator
// revokes a leaked token by deleting it. Held by a finalizer, the token
// still enrolled: the holder of the secret became the node's agent, and
// the node's next tenant would pin the host key it reports.
func TestADeletedEnrollmentTokenHeldByAFinalizerEnrollsNothing(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	tok := enrollmentToken(t, s, "leaked", time.Now().Add(time.Hour))
	hold(t, s, "/apis/nodus.dev/v1/enrollmenttokens/leaked")
	if err := s.Client.NodusV1().EnrollmentTokens().Delete(ctx(t), "leaked", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: tok.Status.Token, CAHash: tok.Status.CAFingerprint, Node: "gpu-9", StateDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("enrolling with a deleted token a finalizer holds: %v, want 401", err)
	}
	if _, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-9", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted token enrolled node gpu-9: %v", err)
	}
}
