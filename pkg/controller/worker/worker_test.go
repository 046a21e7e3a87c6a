package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestRunReturnsAfterItsWorkers: Run returned as soon as its context ended,
// its workers still in a sync: a replica that lost the lead handed it on
// while its controllers still wrote.
func TestRunReturnsAfterItsWorkers(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	queue.Add("key")
	ctx, cancel := context.WithCancel(context.Background())
	inSync, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		Run(ctx, queue, 2, "test", func(context.Context, string) error {
			close(inSync)
			<-release
			finished.Store(true)
			return nil
		})
	}()
	<-inSync
	cancel()
	select {
	case <-returned:
		t.Fatal("Run returned while a worker was still in its sync")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its worker finished")
	}
	if !finished.Load() {
		t.Error("Run returned before the sync finished")
	}
}
