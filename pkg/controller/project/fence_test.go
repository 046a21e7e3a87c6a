package project_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/project"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/projectsweep"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestALeaderResumingAfterItsLeadEmptiesNothingOfTheNextProject: a leader
// emptying a deleted project checked that the project was still there and
// paused, about to write. Another leader finalized the project meanwhile,
// and an operator made one of the same name, with a reservation named as
// the old one's and an execution's output. The paused one resumes its
// round: its deletes named objects by name alone, and its delete of the
// project's data by prefix alone, so it ended the new tenant's reservation
// and deleted its output. (Its next step, or round, finds the project
// replaced and stops: ErrReplaced.)
func TestALeaderResumingAfterItsLeadEmptiesNothingOfTheNextProject(t *testing.T) {
	s := testserver.StartTestServer(t)
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api := s.Client.NodusV1()
	now := time.Now()
	layout := projectsweep.Layout{Projects: "/registry/" + nodusv1.GroupName + "/projects/"}
	paused, err := project.New(versioned.NewForConfigOrDie(s.ServerConfig), externalversions.NewSharedInformerFactory(s.Client, 0), etcd, []string{executionlog.Prefix}, layout)
	if err != nil {
		t.Fatal(err)
	}

	makeProject := func(name string, reservation bool) {
		t.Helper()
		if err := testfleet.Eventually(ctx, 30*time.Second, func(c context.Context) (bool, error) {
			_, err := api.Projects().Create(c, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatalf("project %s could not be made", name)
		}
		if !reservation {
			return
		}
		// The reservation's admission reads projects from a cache, a moment behind.
		if err := testfleet.Eventually(ctx, 30*time.Second, func(c context.Context) (bool, error) {
			return testfleet.Reserve(c, s.Client, name+"-web", name, nodusv1.ReservationPlacement{Node: "n1"}, now.Add(time.Hour), now.Add(2*time.Hour)) == nil, nil
		}); err != nil {
			t.Fatalf("%s's reservation could not be made", name)
		}
	}
	// finalizeAndMakeAgain has the server's own project controller, the
	// leader now, finalize the project, and makes it again.
	finalizeAndMakeAgain := func(name string, reservation bool) {
		t.Helper()
		if reservation {
			// A project with live reservations is not deleted: the
			// operator ends them first.
			if err := api.Reservations().Delete(ctx, name+"-web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := testfleet.Eventually(ctx, time.Minute, func(c context.Context) (bool, error) {
			err := api.Projects().Delete(c, name, metav1.DeleteOptions{})
			return err == nil || apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("%s could not be deleted", name)
		}
		if err := testfleet.Eventually(ctx, time.Minute, func(c context.Context) (bool, error) {
			_, err := api.Projects().Get(c, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("%s was never finalized", name)
		}
		makeProject(name, reservation)
	}
	// emptyPausedAt runs the paused leader's round on project name as it
	// was, the project made again while it pauses before step's writes.
	emptyPausedAt := func(name, step string, reservation bool, meanwhile func()) {
		t.Helper()
		old, err := api.Projects().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reached := false
		_, err = paused.EmptyPausing(ctx, old, func(at string) {
			if at != step {
				return
			}
			reached = true
			finalizeAndMakeAgain(name, reservation)
			meanwhile()
		})
		if !reached {
			t.Fatalf("the round never reached step %s: %v", step, err)
		}
		if err != nil {
			t.Fatalf("the resumed round: %v", err)
		}
		if _, err := paused.EmptyPausing(ctx, old, nil); !errors.Is(err, project.ErrReplaced) {
			t.Errorf("a round on the finalized %s: %v, want ErrReplaced", name, err)
		}
	}

	t.Run("reservations", func(t *testing.T) {
		makeProject("acme", true)
		oldWeb, err := api.Reservations().Get(ctx, "acme-web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		emptyPausedAt("acme", "reservations", true, func() {})
		web, err := api.Reservations().Get(ctx, "acme-web", metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("the new project's reservation: %v", err)
		case web.UID == oldWeb.UID:
			t.Fatalf("the reservation was never made again: %s", web.UID)
		case web.DeletionTimestamp != nil:
			t.Errorf("the new project's reservation is being deleted")
		}
	})
	t.Run("data", func(t *testing.T) {
		makeProject("beta", false)
		output := executionlog.Prefix + "beta/job/0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"
		emptyPausedAt("beta", "data", false, func() {
			if _, err := etcd.Put(ctx, output, "the new tenant's output"); err != nil {
				t.Fatal(err)
			}
		})
		kept, err := etcd.Get(ctx, output, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if kept.Count != 1 {
			t.Error("the new project's output was deleted")
		}
	})
}
