package watchfilter

import (
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// A watch's reader stops it and reads no more: the goroutine passing
// events on must end even with an event waiting for a reader.
func TestStoppedWatchLeavesNothingBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	source := watch.NewFake()
	w := Filter(source, func(e watch.Event) (watch.Event, bool) { return e, true })
	delivered := make(chan struct{})
	go func() {
		// Returns once the event is taken from source, not read from w.
		source.Add(&nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
		close(delivered)
	}()
	<-delivered
	w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the stop, %d before the watch", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, open := <-w.ResultChan(); open {
		t.Error("the stopped watch passed on an event nobody waited for")
	}
}

// What keep drops is not passed on; what it changes is passed on changed.
func TestFilterKeepsAndChanges(t *testing.T) {
	source := watch.NewFake()
	w := Filter(source, func(e watch.Event) (watch.Event, bool) {
		n := e.Object.(*nodusv1.Node)
		if n.Name == "dropped" {
			return e, false
		}
		return watch.Event{Type: watch.Added, Object: n}, true
	})
	defer w.Stop()
	go func() {
		source.Modify(&nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dropped"}})
		source.Modify(&nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kept"}})
	}()
	select {
	case e := <-w.ResultChan():
		if e.Type != watch.Added || e.Object.(*nodusv1.Node).Name != "kept" {
			t.Errorf("got %s of %s, want ADDED of kept", e.Type, e.Object.(*nodusv1.Node).Name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing passed on")
	}
}
