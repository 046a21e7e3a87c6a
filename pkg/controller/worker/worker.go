// Package worker runs a controller's queue: n workers take keys, sync
// them, and put failed keys back with rate-limited back-off.
package worker

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Run syncs keys from queue on n workers until ctx ends, then shuts the
// queue down and returns once every worker has: a replica that lost the
// lead hands it on only after its controllers' last writes, not beside
// them.
func Run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], n int, name string, syncKey func(context.Context, string) error) {
	var workers sync.WaitGroup
	for i := 0; i < n; i++ {
		workers.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for process(ctx, queue, name, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	workers.Wait()
}

func process(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], name string, syncKey func(context.Context, string) error) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := syncKey(ctx, key); err != nil {
		klog.V(2).InfoS("retrying", "controller", name, "key", key, "err", err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
