package integration

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestANamespacesWatchListEndsItsInitialEvents: client-go's informers may
// list by watching (sendInitialEvents), and wait for the bookmark whose
// k8s.io/initial-events-end annotation says the initial events are over.
// The namespaces a member watches are its projects made namespaces: the
// bookmark must keep that annotation, or the member's informer never
// syncs; and the initial events are its projects only.
func TestANamespacesWatchListEndsItsInitialEvents(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	client := kubernetes.NewForConfigOrDie(f.member)
	sendInitialEvents := true
	w, err := client.CoreV1().Namespaces().Watch(ctx(t), metav1.ListOptions{SendInitialEvents: &sendInitialEvents,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var initial []string
	timeout := time.After(15 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed after %v, before the initial events ended", initial)
			}
			ns, isNamespace := e.Object.(*corev1.Namespace)
			if !isNamespace {
				t.Fatalf("a %s event of %T: %+v", e.Type, e.Object, e.Object)
			}
			switch e.Type {
			case watch.Added:
				initial = append(initial, ns.Name)
			case watch.Bookmark:
				if ns.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
				if len(initial) != 1 || initial[0] != "acme" {
					t.Errorf("mary's initial namespaces: %v, want [acme]", initial)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no bookmark ended the initial events (%v) within 15 s", initial)
		}
	}
}
