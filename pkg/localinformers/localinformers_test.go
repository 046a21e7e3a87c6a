package localinformers_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/localinformers"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// A controller that changes an object it read (a bug, but one an informer
// contains) must not change what the API answers: the informer's objects,
// listed or watched, are not the watch cache's.
func TestInformersOwnWhatTheyHold(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	nodes := s.Client.NodusV1().Nodes()
	if _, err := nodes.Create(ctx, &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "a"}},
		Spec:       nodusv1.NodeSpec{Pool: "p", ResourceClass: "gpu", LoginUser: "ubuntu", Traits: []string{"CUSTOM_A"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	factory := localinformers.NewFactory(externalversions.NewSharedInformerFactory(nowhere(t), 0), s.Stores.Sources())
	lister := factory.Nodus().V1().Nodes().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			t.Fatalf("the informer of %v did not sync", typ)
		}
	}

	mutateAndCheck := func(stage, wantRack string) {
		t.Helper()
		held, err := lister.Get("n1")
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		held.Labels["rack"] = "changed by the informer's reader"
		held.Spec.Traits[0] = "CUSTOM_CHANGED"
		// ResourceVersion 0 reads the watch cache.
		cached, err := nodes.Get(ctx, "n1", metav1.GetOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		if cached.Labels["rack"] != wantRack || cached.Spec.Traits[0] != "CUSTOM_A" {
			t.Errorf("%s: the API answers labels %v, traits %v after the informer's object was changed; want rack %q, traits [CUSTOM_A]",
				stage, cached.Labels, cached.Spec.Traits, wantRack)
		}
	}
	mutateAndCheck("streamed at the start", "a")

	// A reflector that cannot stream the start lists instead.
	list, err := localinformers.ListerWatcher(s.Stores.Nodes.Main).List(metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	listed := list.(*nodusv1.NodeList).Items[0]
	listed.Labels["rack"] = "changed by the lister's reader"
	listed.Spec.Traits[0] = "CUSTOM_CHANGED"
	if cached, err := nodes.Get(ctx, "n1", metav1.GetOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	} else if cached.Labels["rack"] != "a" || cached.Spec.Traits[0] != "CUSTOM_A" {
		t.Errorf("listed: the API answers labels %v, traits %v after the listed object was changed", cached.Labels, cached.Spec.Traits)
	}

	// A change reaches the informer as a watch event.
	stored, err := nodes.Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored.Labels["rack"] = "b"
	if _, err := nodes.Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx, 30*time.Second, func(context.Context) (bool, error) {
		n, err := lister.Get("n1")
		return err == nil && n.Labels["rack"] != "a" && n.Labels["rack"] != "changed by the informer's reader", nil
	}); err != nil {
		t.Fatalf("the informer did not see the update: %v", err)
	}
	mutateAndCheck("watched", "b")
}

// The factory falls back to its client for a type without a store: every
// kind the generated informers offer must have one, or the server's
// informers would quietly go through its HTTP API again.
func TestEveryInformerReadsAStore(t *testing.T) {
	s := testserver.StartTestServer(t)
	factory := localinformers.NewFactory(externalversions.NewSharedInformerFactory(nowhere(t), 0), s.Stores.Sources())
	group := reflect.ValueOf(factory.Nodus().V1())
	for i := range group.NumMethod() {
		group.Method(i).Call(nil)[0].MethodByName("Informer").Call(nil)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	synced := factory.WaitForCacheSync(ctx.Done())
	if len(synced) != group.NumMethod() {
		t.Fatalf("%d informers started for the %d kinds of the group", len(synced), group.NumMethod())
	}
	for typ, ok := range synced {
		if !ok {
			t.Errorf("the informer of %v did not sync: its kind has no store in Stores.Sources", typ)
		}
	}
}

// nowhere is a client that reaches no server: what an informer built with
// it holds came through a store.
func nowhere(t *testing.T) versioned.Interface {
	t.Helper()
	client, err := versioned.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
