package reservation_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/reservation"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestALaggingCacheEndsNoReservation: a reservation that lost its node to
// another reservation's claim ends, and the controller learns that from
// its node cache. A cache that lags (the lead passed from the replica that
// wrote the reservation's own claim; the informer still shows the node's
// earlier holder) must not end a paying tenant's access: the controller
// reads the node from etcd first. Here the server's reservation is active
// on its own claim, and a second controller's cache says the node is
// another's.
func TestALaggingCacheEndsNoReservation(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx := t.Context()
	c := s.Client.NodusV1()
	if _, err := c.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "acme"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := testfleet.Node(ctx, s.Client, "n1", "fra1", "gpu", "ubuntu"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := testfleet.Reserve(ctx, s.Client, "r1", "acme", nodusv1.ReservationPlacement{Node: "n1"}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var active *nodusv1.Reservation
	var node *nodusv1.Node
	if err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if active, err = c.Reservations().Get(ctx, "r1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		if node, err = c.Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		host, err := c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{})
		return err == nil && active.Status.State == nodusv1.ReservationStateActive && node.Status.ReservationUID == active.UID &&
			host.Status.Reservation.Epoch == active.Status.Epoch, nil
	}); err != nil {
		t.Fatalf("r1 never became active on its claim: %v", err)
	}

	factory := externalversions.NewSharedInformerFactory(s.Client, 0)
	controller, err := reservation.New(s.Client, factory)
	if err != nil {
		t.Fatal(err)
	}
	v1 := factory.Nodus().V1()
	stale := node.DeepCopy()
	stale.Status.Reservation, stale.Status.ReservationUID = "earlier", "a-uid-of-another"
	for _, add := range []error{
		v1.Reservations().Informer().GetIndexer().Add(active),
		v1.Nodes().Informer().GetIndexer().Add(stale),
	} {
		if add != nil {
			t.Fatal(add)
		}
	}
	if err := controller.Sync(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	after, err := c.Reservations().Get(ctx, "r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.State != nodusv1.ReservationStateActive || after.Status.Epoch != active.Status.Epoch {
		t.Errorf("a cache that showed r1's node as another's ended r1: %s at epoch %d, was active at %d",
			after.Status.State, after.Status.Epoch, active.Status.Epoch)
	}
}
