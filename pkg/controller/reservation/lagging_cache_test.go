package reservation_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/reservation"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
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
	s, active, node, _ := activeOnItsClaim(t)
	ctx, c := t.Context(), s.Client.NodusV1()
	stale := node.DeepCopy()
	stale.Status.Reservation, stale.Status.ReservationUID = "earlier", "a-uid-of-another"
	controller := withCache(t, s, active, stale, nil)
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

// withCache is a reservation controller of s whose caches hold what it is
// given (r and host may be nil) and acme as s has it, filled by hand: a second
// replica's view, lagging where the test says.
func withCache(t *testing.T, s *testserver.Server, r *nodusv1.Reservation, node *nodusv1.Node, host *nodusv1.ReservedHost) *reservation.Controller {
	t.Helper()
	factory := externalversions.NewSharedInformerFactory(s.Client, 0)
	// It writes as the server's own controller does.
	controller, err := reservation.New(versioned.NewForConfigOrDie(s.ServerConfig), factory)
	if err != nil {
		t.Fatal(err)
	}
	project, err := s.Client.NodusV1().Projects().Get(t.Context(), "acme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v1 := factory.Nodus().V1()
	adds := []error{
		v1.Nodes().Informer().GetIndexer().Add(node),
		v1.Projects().Informer().GetIndexer().Add(project),
	}
	if r != nil {
		adds = append(adds, v1.Reservations().Informer().GetIndexer().Add(r))
	}
	if host != nil {
		adds = append(adds, v1.ReservedHosts().Informer().GetIndexer().Add(host))
	}
	for _, err := range adds {
		if err != nil {
			t.Fatal(err)
		}
	}
	return controller
}

// activeOnItsClaim is a server with reservation r1 active on node n1's
// claim, and r1's ReservedHost in acme at r1's epoch.
func activeOnItsClaim(t *testing.T) (*testserver.Server, *nodusv1.Reservation, *nodusv1.Node, *nodusv1.ReservedHost) {
	t.Helper()
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
	var host *nodusv1.ReservedHost
	if err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		if active, err = c.Reservations().Get(ctx, "r1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		if node, err = c.Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		host, err = c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{})
		return err == nil && active.Status.State == nodusv1.ReservationStateActive && node.Status.ReservationUID == active.UID &&
			host.Status.Reservation.Epoch == active.Status.Epoch, nil
	}); err != nil {
		t.Fatalf("r1 never became active on its claim: %v", err)
	}

	return s, active, node, host
}

// TestALaggingCacheDeletesNoHost: the ReservedHost in a reservation's
// project under its name is an earlier reservation's when it is ahead of
// the reservation (a higher epoch, a release), and is deleted. The host is
// written after the reservation, and the controller's caches may show the
// host's write before the reservation's (two watches): a host released a
// moment ago beside its reservation still active in the cache must stay.
func TestALaggingCacheDeletesNoHost(t *testing.T) {
	s, active, node, _ := activeOnItsClaim(t)
	ctx, c := t.Context(), s.Client.NodusV1()
	agreed, epoch := true, active.Status.Epoch
	if _, err := c.ReservedHosts("acme").ReleaseCapacity(ctx, "r1", &nodusv1.ReservedHostReleaseRequest{Agreed: &agreed, Epoch: &epoch},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var host *nodusv1.ReservedHost
	if err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		host, err = c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{})
		return err == nil && host.Status.Reservation.State == nodusv1.ReservationStateReleasing, nil
	}); err != nil {
		t.Fatalf("r1's host never showed the release: %v", err)
	}
	// The cache: r1 as it was before the release, its host after.
	controller := withCache(t, s, active, node, host)
	// The sync projects r1 as the cache shows it, whose write of the host
	// (a lower epoch) is refused: an error, and a retry once the cache
	// caught up. The host must be there to write.
	if err := controller.Sync(ctx, "r1"); err != nil {
		t.Logf("the sync on a lagging cache: %v", err)
	}
	after, err := c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{})
	if err != nil || after.UID != host.UID {
		t.Errorf("a cache that showed r1's released host beside r1 active deleted the host: %v", err)
	}
}

// TestALaggingCacheForgetsNoLiveReservation: a reservation the controller's
// cache does not hold was deleted, and the controller hands its node over
// to cleaning and deletes its host. The node's and host's caches may show
// a reservation's claim and host before the reservation's own cache shows
// it (three watches; the lead passed a moment ago): that reservation is
// live, and a handover would end a paying tenant's access and reset the
// account under them. The controller asks etcd before it forgets.
func TestALaggingCacheForgetsNoLiveReservation(t *testing.T) {
	s, active, node, host := activeOnItsClaim(t)
	ctx, c := t.Context(), s.Client.NodusV1()
	controller := withCache(t, s, nil, node, host)
	if err := controller.Sync(ctx, "r1"); err != nil {
		t.Logf("the sync on a lagging cache: %v", err)
	}
	after, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || after.Status.ReservationUID != active.UID || after.Status.Cleaning != nil {
		t.Errorf("a cache without live r1 handed its node over: %v, claim %s/%s, cleaning %+v", err,
			after.Status.Reservation, after.Status.ReservationUID, after.Status.Cleaning)
	}
	if got, err := c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{}); err != nil || got.UID != host.UID {
		t.Errorf("a cache without live r1 deleted its host: %v", err)
	}
}

// TestAPausedLeaderForgetsNoNamesake: a replica found reservation r1 gone
// from etcd, and paused (a GC pause, a stalled VM) past its lead. Another
// replica led meanwhile: r1 was made again, claimed its node and got its
// host. Resumed with caches that show all that under the name r1, the
// first forgot the deleted r1 with the new one's things: it handed the new
// tenant's node to cleaning (its sessions ended, its account reset) and
// deleted its host. What the caches show is asked against etcd once more.
func TestAPausedLeaderForgetsNoNamesake(t *testing.T) {
	s, again, node, host := activeOnItsClaim(t)
	ctx, c := t.Context(), s.Client.NodusV1()
	controller := withCache(t, s, nil, node, host)
	if err := controller.Forget(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	after, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil || after.Status.ReservationUID != again.UID || after.Status.Cleaning != nil {
		t.Errorf("the paused leader handed the live namesake's node over: %v, claim %s/%s, cleaning %+v", err,
			after.Status.Reservation, after.Status.ReservationUID, after.Status.Cleaning)
	}
	if got, err := c.ReservedHosts("acme").Get(ctx, "r1", metav1.GetOptions{}); err != nil || got.UID != host.UID {
		t.Errorf("the paused leader deleted the live namesake's host: %v", err)
	}
}
