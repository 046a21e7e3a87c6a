package main

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// listAndWatch lists what matches opts, then watches it from that list on
// and resumes where it left off when the server closes the stream: under
// load the apiserver's watch cache closes a watcher that falls behind (a
// run of the allocation scenario lost its plain watch after 801 of 1,000
// allocations and waited for the rest until its timeout), as it may any
// client's.
func listAndWatch[L interface{ GetResourceVersion() string }](ctx context.Context, opts metav1.ListOptions,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) (L, watch.Interface, error) {
	now, err := list(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector})
	if err != nil {
		return now, nil, err
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, now.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
			return watchFn(ctx, o)
		},
	})
	return now, w, err
}
