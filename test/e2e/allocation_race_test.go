package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/clusteridentity"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestAllocationRaceAcrossTwoServers: 400 allocations for 200 matching
// nodes, from 16 concurrent clients, through two nodus-server processes
// sharing one etcd: exactly 200 become active, 200 fail, and no node is in
// two allocations.
func TestAllocationRaceAcrossTwoServers(t *testing.T) {
	requireKubectl(t)
	const nodes, allocs, clients = 200, 400, 16
	apis := twoServersOnOneEtcd(t)
	ctx := context.Background()
	a := apis[0].NodusV1()
	if _, err := a.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "race"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func(n int, op func(i int) error) {
		t.Helper()
		if err := testfleet.Parallel(n, clients, op); err != nil {
			t.Fatal(err)
		}
	}
	run(nodes, func(i int) error {
		name := fmt.Sprintf("race-%03d", i)
		if _, err := testfleet.Node(ctx, apis[i%2], name, "race", "gpu-race", ""); err != nil {
			return err
		}
		return testfleet.Heartbeat(ctx, apis[i%2], name, nodusv1.NodeHeartbeat{})
	})
	run(allocs, func(i int) error {
		_, err := apis[i%2].NodusV1().Allocations().Create(ctx, &nodusv1.Allocation{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%03d", i)},
			Spec:       nodusv1.AllocationSpec{ResourceClass: "gpu-race"}}, metav1.CreateOptions{})
		return err
	})

	var list *nodusv1.AllocationList
	var err error
	err = testfleet.Eventually(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		list, err = apis[1].NodusV1().Allocations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, al := range list.Items {
			if al.Status.State == "" || al.Status.State == nodusv1.AllocationStateAllocating {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("allocations still allocating: %v", err)
	}
	active, failed := 0, 0
	holder := map[string]string{}
	for _, al := range list.Items {
		switch al.Status.State {
		case nodusv1.AllocationStateActive:
			active++
			if other, taken := holder[al.Status.Node]; taken {
				t.Errorf("node %s is in allocations %s and %s", al.Status.Node, other, al.Name)
			}
			holder[al.Status.Node] = al.Name
		case nodusv1.AllocationStateError:
			failed++
		}
	}
	if active != nodes || failed != allocs-nodes {
		t.Errorf("%d active and %d failed, want %d and %d", active, failed, nodes, allocs-nodes)
	}
	stored, err := apis[0].NodusV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range stored.Items {
		if n.Status.Allocation == "" || holder[n.Name] != n.Status.Allocation {
			t.Errorf("node %s records allocation %q, the allocations say %q", n.Name, n.Status.Allocation, holder[n.Name])
		}
	}
}

// twoServersOnOneEtcd starts an etcd and two nodus-server processes on it,
// and returns an operator's client of each.
func twoServersOnOneEtcd(t *testing.T) []versioned.Interface {
	t.Helper()
	etcd, err := embeddedetcd.StartInsecure(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Stop(context.Background()) })
	key := filepath.Join(t.TempDir(), "cluster.key")
	if _, err := clusteridentity.EnsureKeyFile(key); err != nil {
		t.Fatal(err)
	}
	var apis []versioned.Interface
	for i := 0; i < 2; i++ {
		p := startServerWith(t, t.TempDir(), "--etcd-servers", etcd.ClientURL, "--cluster-key-file", key)
		cfg := rest.CopyConfig(p.Config)
		cfg.QPS, cfg.Burst = 1000, 1000
		apis = append(apis, versioned.NewForConfigOrDie(cfg))
	}
	return apis
}
