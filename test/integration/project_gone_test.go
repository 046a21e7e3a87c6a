package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAReservationOfAProjectThatIsGoneHoldsNoHost: a reservation is
// admitted only for a live project, but one admitted a moment before its
// project's deletion, and stored after the project controller listed the
// project's reservations, outlives the project (as does one stored before
// that admission existed). It held its node for its whole term, for a
// customer who no longer exists. Such a reservation is planted here in
// etcd, past admission; the reservation controller must retire it, as the
// project's deletion retires the others, and leave its node free.
func TestAReservationOfAProjectThatIsGoneHoldsNoHost(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "orphan-host")
	if r := f.heartbeat(t, "orphan-host", nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	now := time.Now()
	r := testfleet.Reservation("orphan", "gone", nodusv1.ReservationPlacement{Node: "orphan-host"}, now.Add(-time.Hour), now.Add(time.Hour))
	r.APIVersion, r.Kind = nodusv1.SchemeGroupVersion.String(), "Reservation"
	r.UID, r.CreationTimestamp = uuid.NewUUID(), metav1.NewTime(now.Truncate(time.Second))
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if _, err := etcd.Put(ctx(t), "/registry/nodus.dev/reservations/orphan", string(data)); err != nil {
		t.Fatal(err)
	}
	c := s.Client.NodusV1()
	if err := testfleet.Eventually(ctx(t), 15*time.Second, func(c2 context.Context) (bool, error) {
		_, err := c.Reservations().Get(c2, "orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		got, _ := c.Reservations().Get(ctx(t), "orphan", metav1.GetOptions{})
		t.Fatalf("a reservation of a project that does not exist stays: %+v", got)
	}
	n := waitNode(t, s, "orphan-host", func(n *nodusv1.Node) bool { return n.Status.Reservation == "" && n.Status.Allocation == "" })
	if n.Status.ProvisionState == nodusv1.ProvisionStateActive {
		t.Errorf("the node of the retired reservation is still active: %+v", n.Status)
	}
}
