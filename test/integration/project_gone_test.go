package integration

import (
	"context"
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
	putInEtcd(t, s, "/registry/nodus.dev/reservations/orphan", r)
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

// TestAReservationOfAnEarlierNamesakeProjectIsRetired: a reservation
// admitted for a project a moment before the project's deletion, and
// stored after the project controller listed its reservations, outlives
// it; once another customer makes a project of the name, the orphan rule
// (a reservation whose project is missing) no longer sees it, and the new
// project's members got the host the operator assigned to the earlier
// customer. Here the earlier project's key is replaced in etcd by a new
// project's under the name, underneath the reservation, while no
// controller leads. The reservation,
// made before the project now under its name, must be retired and its node
// let go.
func TestAReservationOfAnEarlierNamesakeProjectIsRetired(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	if _, err := c.Projects().Create(ctx(t), project("delta", nodusv1.ProjectMember{Name: "dora", Role: nodusv1.ProjectRoleAdmin}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.node(t, "namesake-host")
	if r := f.heartbeat(t, "namesake-host", nodusv1.NodeHeartbeat{AgentGeneration: 1}); r.code != 200 {
		t.Fatalf("heartbeat: %d %s", r.code, r.body)
	}
	now := time.Now()
	if err := testfleet.Reserve(ctx(t), s.Client, "namesake", "delta", nodusv1.ReservationPlacement{Node: "namesake-host"}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	earlier := waitReservation(t, s, "namesake", func(r *nodusv1.Reservation) bool { return r.Status.State == nodusv1.ReservationStateActive })

	// Another customer's project under the name, its key made after the
	// reservation's (a second later, so that no creation time ties).
	time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second)))
	later := project("delta", nodusv1.ProjectMember{Name: "zed", Role: nodusv1.ProjectRoleAdmin})
	later.APIVersion, later.Kind = nodusv1.SchemeGroupVersion.String(), "Project"
	later.UID, later.CreationTimestamp = uuid.NewUUID(), metav1.NewTime(time.Now().Truncate(time.Second))
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	const key = "/registry/nodus.dev/projects/delta"
	// While no controller leads (a failover), so that the rule for a
	// reservation whose project is missing never sees the moment between.
	giveBack := takeTheLead(t, etcd)
	if _, err := etcd.Delete(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	putInEtcd(t, s, key, later)
	giveBack()

	if err := testfleet.Eventually(ctx(t), 15*time.Second, func(c2 context.Context) (bool, error) {
		r, err := c.Reservations().Get(c2, "namesake", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && r.UID != earlier.UID), nil
	}); err != nil {
		got, _ := c.Reservations().Get(ctx(t), "namesake", metav1.GetOptions{})
		t.Fatalf("the earlier project's reservation stays for the project made under its name since: %+v", got)
	}
	waitNode(t, s, "namesake-host", func(n *nodusv1.Node) bool {
		return n.Status.Reservation == "" || n.Status.ReservationUID != earlier.UID
	})
	if err := testfleet.Eventually(ctx(t), 15*time.Second, func(c2 context.Context) (bool, error) {
		_, err := c.ReservedHosts("delta").Get(c2, "namesake", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Error("the new project shows the earlier one's host")
	}
}
