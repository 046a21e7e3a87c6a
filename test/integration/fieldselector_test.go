package integration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestNodesAreSelectedByTheirReservation lists nodes by the reservation
// holding them, a column of `kubectl get nodes`: the store knew the field,
// the field selectors refused it (400 "not supported").
func TestNodesAreSelectedByTheirReservation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "held", now.Add(-time.Hour), now.Add(time.Hour))
	f.node(t, "free")
	n := waitNode(t, s, "held", func(n *nodusv1.Node) bool { return n.Status.Reservation != "" })
	list, err := s.Client.NodusV1().Nodes().List(ctx(t), metav1.ListOptions{FieldSelector: "status.reservation=" + n.Status.Reservation})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "held" {
		t.Fatalf("nodes held by %s: %v %v", n.Status.Reservation, err, list)
	}
}
