package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestANameMadeAgainDuringAFailoverInheritsNoNode: as
// TestANameMadeAgainInheritsNoNode (handover_test.go), with no controller
// running between the deletion and the new reservation (the lead passing
// from one replica to another), so the controller never sees
// the first reservation go. The node's claim names the first reservation
// by UID as well: the second must find the node cleaned of the first
// tenant before its access; the first tenant's ReservedHost goes when the
// name is made again for another project. In the same project it becomes
// the new reservation's, unless it is ahead of it (a higher epoch, a
// release): then it would refuse every write of the new one, and goes too.
func TestANameMadeAgainDuringAFailoverInheritsNoNode(t *testing.T) {
	for _, project := range []string{"other", "acme"} {
		t.Run("for "+project, func(t *testing.T) { nameMadeAgainDuringAFailover(t, project, false) })
	}
	t.Run("for acme, after a release", func(t *testing.T) { nameMadeAgainDuringAFailover(t, "acme", true) })
}

func nameMadeAgainDuringAFailover(t *testing.T, project string, releasedFirst bool) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	first := f.host(t, "gpu-7", now.Add(-time.Hour), now.Add(time.Hour))
	if releasedFirst {
		if r := f.release(t, f.admin, "gpu-7", agreed, ""); r.code != 200 {
			t.Fatalf("release: %d %s", r.code, r.body)
		}
		first = f.waitHost(t, "gpu-7", func(h *nodusv1.ReservedHost) bool {
			return h.Status.Reservation.State == nodusv1.ReservationStateReleasing
		})
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	giveBack := takeTheLead(t, etcd)
	if err := c.Reservations().Delete(ctx(t), "gpu-7", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Reserve(ctx(t), s.Client, "gpu-7", project, nodusv1.ReservationPlacement{Node: "gpu-7"}, now.Add(-time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	giveBack()

	var cleaning *nodusv1.Node
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "gpu-7", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n, err := c.Nodes().Get(cx, "gpu-7", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cleaning = n
		if r.Status.State == nodusv1.ReservationStateActive {
			return false, fmt.Errorf("%s's gpu-7 became active on a node no one cleaned of acme's: %+v", project, r.Status)
		}
		return n.Status.ProvisionState == nodusv1.ProvisionStateCleaning && n.Status.Cleaning != nil && n.Status.Cleaning.Reservation == "gpu-7", nil
	}); err != nil {
		t.Fatalf("the node was never handed over to cleaning: %v; node %+v", err, cleaning)
	}
	if project != "acme" || releasedFirst {
		if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
			h, err := c.ReservedHosts("acme").Get(cx, "gpu-7", metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && h.UID != first.UID), nil
		}); err != nil {
			t.Errorf("acme still sees the deleted reservation's ReservedHost: %v", err)
		}
	}

	// Cleaned, the node is the new reservation's, under its own UID.
	if r := f.heartbeat(t, "gpu-7", nodusv1.NodeHeartbeat{AgentGeneration: 1, Cleaning: &nodusv1.CleaningEvidence{
		Request: cleaning.Status.Cleaning.Request, AppliedEpoch: cleaning.Status.Cleaning.Epoch, Succeeded: true}}); r.code != 200 {
		t.Fatalf("cleaning evidence: %d %s", r.code, r.body)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		r, err := c.Reservations().Get(cx, "gpu-7", metav1.GetOptions{})
		return err == nil && r.Status.State == nodusv1.ReservationStateActive, err
	}); err != nil {
		t.Fatalf("the new reservation never got the cleaned node: %v", err)
	}
	r := f.reservation(t, "gpu-7")
	n, err := c.Nodes().Get(ctx(t), "gpu-7", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.Reservation != "gpu-7" || n.Status.ReservationUID != r.UID {
		t.Errorf("the node's claim: %q %q, want gpu-7 %q", n.Status.Reservation, n.Status.ReservationUID, r.UID)
	}
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
		h, err := c.ReservedHosts(project).Get(cx, "gpu-7", metav1.GetOptions{})
		return err == nil && h.Status.Reservation.State == nodusv1.ReservationStateActive && h.Status.Reservation.Epoch == r.Status.Epoch, nil
	}); err != nil {
		t.Errorf("%s's ReservedHost never showed the new reservation: %v", project, err)
	}
}
