package reservation

import "context"

// Sync is one sync of reservation name, for tests that fill the
// controller's caches by hand.
func (c *Controller) Sync(ctx context.Context, name string) error { return c.sync(ctx, name) }

// Forget retires what reservation name left, as a sync that found it gone
// from etcd a moment before does.
func (c *Controller) Forget(ctx context.Context, name string) error { return c.forget(ctx, name) }
