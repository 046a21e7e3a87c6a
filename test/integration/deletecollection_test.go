package integration

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestDeletingACollectionKeepsEachDeletesChecks deletes through
// DeleteCollection what a single delete refuses: the generic store's
// DeleteCollection calls its own Delete, not the registry's around it, and
// passed over ProjectHasReservations (the project's finalizer then ended
// every live reservation) and NodeActive.
func TestDeletingACollectionKeepsEachDeletesChecks(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "held", now.Add(-time.Hour), now.Add(time.Hour))
	f.node(t, "allocated")
	backfill(t, s, "in-use", "allocated")
	f.reserve(t, "allocated", nodusv1.ReservationPlacement{Allocation: "in-use"}, now.Add(-time.Hour), now.Add(time.Hour))
	f.waitHost(t, "allocated", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})

	err := c.Projects().DeleteCollection(ctx(t), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=acme"})
	if reason := apierrors.ReasonForError(err); reason != apierror.ReasonProjectHasReservations {
		t.Errorf("a collection delete of a project with live reservations: %v (%s)", err, reason)
	}
	if p, err := c.Projects().Get(ctx(t), "acme", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the project is deleting: %v %+v", err, p)
	}

	err = c.Allocations().DeleteCollection(ctx(t), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=in-use"})
	if reason := apierrors.ReasonForError(err); reason != apierror.ReasonNodeActive {
		t.Errorf("a collection delete of an active node's allocation: %v (%s)", err, reason)
	}
	if _, err := c.Allocations().Get(ctx(t), "in-use", metav1.GetOptions{}); err != nil {
		t.Errorf("the allocation is gone: %v", err)
	}
	// What a single delete takes, a collection delete takes too.
	if _, err := c.Projects().Create(ctx(t), project("empty"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Projects().DeleteCollection(ctx(t), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=empty"}); err != nil {
		t.Fatalf("a collection delete of an empty project: %v", err)
	}
	if p, err := c.Projects().Get(ctx(t), "empty", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the empty project was not deleted: %+v", p)
	}
}
