package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAllocatingSurvivesRestart: an allocation a server left "allocating"
// when it stopped is finished by the next server.
func TestAllocatingSurvivesRestart(t *testing.T) {
	testserver.KeepLogs(t)
	dir := t.TempDir()
	s, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, s)
	readyNodes(t, f, "after-restart")
	s.Stop()

	// While no server runs, an allocation is stored as a crashed server
	// would have left it: accepted, still allocating.
	etcd, err := embeddedetcd.Start(filepath.Join(dir, "etcd"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	client, err := testserver.EtcdClientFor(dir)
	if err != nil {
		t.Fatal(err)
	}
	left := `{"kind":"Allocation","apiVersion":"nodus.dev/v1","metadata":{"name":"left-over","uid":"6f1c0c43-5a7e-4a3c-9b7e-2f9d0c1d4e5f",` +
		`"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"resourceClass":"gpu-h100x8"},"status":{"state":"allocating"}}`
	if _, err := client.Put(context.Background(), "/registry/nodus.dev/allocations/left-over", left); err != nil {
		t.Fatal(err)
	}
	client.Close()
	etcd.Stop(context.Background())

	s2, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Stop)
	var a *nodusv1.Allocation
	err = testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		a, err = s2.Client.NodusV1().Allocations().Get(c, "left-over", metav1.GetOptions{})
		return err == nil && a.Status.State != nodusv1.AllocationStateAllocating, nil
	})
	if err != nil || a.Status.State != nodusv1.AllocationStateActive || a.Status.Node != "after-restart" {
		t.Fatalf("the left-over allocation was not finished: %v %+v", err, a)
	}
}
