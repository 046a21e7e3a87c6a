package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestReservationRaceAcrossTwoServers races reservations through two
// nodus-server processes on one etcd: 20 for one node end with exactly one
// live, and 400 class-placed ones over 200 nodes never put two on one node.
func TestReservationRaceAcrossTwoServers(t *testing.T) {
	requireKubectl(t)
	const nodes, classPlaced, contenders = 200, 400, 20
	apis := twoServersOnOneEtcd(t)
	ctx := context.Background()
	a := apis[0].NodusV1()
	for _, name := range []string{"acme", "beta"} {
		if _, err := a.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "race"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parallel := func(n, clients int, op func(i int) error) {
		t.Helper()
		if err := testfleet.Parallel(n, clients, op); err != nil {
			t.Fatal(err)
		}
	}
	parallel(nodes+1, 16, func(i int) error {
		name, class := fmt.Sprintf("race-%03d", i), "gpu-race"
		if i == nodes {
			name, class = "contested", "gpu-contested"
		}
		if _, err := testfleet.Node(ctx, apis[i%2], name, "race", class, "ubuntu"); err != nil {
			return err
		}
		return testfleet.Heartbeat(ctx, apis[i%2], name, nodusv1.NodeHeartbeat{})
	})
	term := func(name, project string, placement nodusv1.ReservationPlacement) *nodusv1.Reservation {
		return testfleet.Reservation(name, project, placement, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	}

	// 20 for one node, from 20 clients at once, half through each server.
	var mu sync.Mutex
	var accepted []string
	parallel(contenders, contenders, func(i int) error {
		project := []string{"acme", "beta"}[i%2]
		name := fmt.Sprintf("contender-%02d", i)
		_, err := apis[i%2].NodusV1().Reservations().Create(ctx, term(name, project, nodusv1.ReservationPlacement{Node: "contested"}), metav1.CreateOptions{})
		switch {
		case err == nil:
			mu.Lock()
			accepted = append(accepted, name)
			mu.Unlock()
		case apierrors.ReasonForError(err) != apierror.ReasonNodeReserved:
			return err
		}
		return nil
	})
	// 400 class-placed ones for 200 nodes.
	parallel(classPlaced, 16, func(i int) error {
		_, err := apis[i%2].NodusV1().Reservations().Create(ctx,
			term(fmt.Sprintf("class-%03d", i), []string{"acme", "beta"}[i%2], nodusv1.ReservationPlacement{ResourceClass: "gpu-race"}), metav1.CreateOptions{})
		return err
	})

	// Settled: every class-placed reservation either active or pending with
	// an allocation that ended in error; exactly one contender active.
	var list *nodusv1.ReservationList
	var err error
	err = testfleet.Eventually(ctx, 4*time.Minute, func(ctx context.Context) (bool, error) {
		list, err = apis[1].NodusV1().Reservations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		active := 0
		for _, r := range list.Items {
			if r.Status.State == nodusv1.ReservationStateActive {
				active++
			}
		}
		return active == nodes+1, nil
	})
	if err != nil {
		t.Fatalf("the race never settled at %d active reservations: %v", nodes+1, err)
	}
	time.Sleep(2 * time.Second) // a double activation would show by now
	list, err = apis[0].NodusV1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	contendersActive := 0
	for _, r := range list.Items {
		if r.Status.State != nodusv1.ReservationStateActive {
			continue
		}
		if other, taken := holder[r.Status.Node]; taken {
			t.Errorf("node %s has two active reservations: %s and %s", r.Status.Node, other, r.Name)
		}
		holder[r.Status.Node] = r.Name
		if r.Spec.Placement.Node == "contested" {
			contendersActive++
		}
	}
	if contendersActive != 1 || len(holder) != nodes+1 {
		t.Errorf("%d contenders active (want 1), %d nodes held (want %d)", contendersActive, len(holder), nodes+1)
	}
	stored, err := apis[1].NodusV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range stored.Items {
		if n.Status.Reservation == "" || holder[n.Name] != n.Status.Reservation {
			t.Errorf("node %s's claim names %q, the active reservation on it is %q", n.Name, n.Status.Reservation, holder[n.Name])
		}
	}
	t.Logf("%d of %d contenders accepted at creation (the rest refused with NodeReserved), 1 active; %d class-placed reservations active on %d nodes",
		len(accepted), contenders, len(holder)-1, nodes)
}
