package localinformers

import (
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// A reflector stops its watch and reads no more: the goroutine passing
// events on must end even with an event waiting for a reader.
func TestStoppedWatchLeavesNothingBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	source := watch.NewFake()
	w := ownObjects(source)
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
