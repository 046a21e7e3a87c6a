package project

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/fake"
	listers "github.com/nodus-dev/nodus/pkg/generated/listers/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/project"
)

// TestAStaleDeletedProjectEmptiesNothingOfItsSuccessor: a leader paused
// while its cache showed project acme being deleted; meanwhile another
// leader finalized it and an operator made acme again, with a reservation.
// The paused one resumes with the stale object: it must not empty the new
// project (delete its reservations, whose nodes would then be cleaned
// under their tenants), but act only on the project etcd has.
func TestAStaleDeletedProjectEmptiesNothingOfItsSuccessor(t *testing.T) {
	gone := metav1.NewTime(time.Now().Add(-time.Minute))
	stale := &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "acme", UID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9",
		DeletionTimestamp: &gone, Finalizers: []string{project.Finalizer}}}
	successor := &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "acme", UID: "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
		Finalizers: []string{project.Finalizer}}}
	theirs := &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: nodusv1.ReservationSpec{Project: "acme"}}
	client := fake.NewSimpleClientset(successor, theirs)
	projects := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := projects.Add(stale); err != nil {
		t.Fatal(err)
	}
	c := &Controller{client: client, projects: listers.NewProjectLister(projects)}
	if err := c.sync(context.Background(), "acme"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if _, err := client.NodusV1().Reservations().Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		t.Errorf("the new project's reservation: %v", err)
	}
	if p, err := client.NodusV1().Projects().Get(context.Background(), "acme", metav1.GetOptions{}); err != nil || len(p.Finalizers) != 1 {
		t.Errorf("the new project: %v %+v", err, p)
	}
}
