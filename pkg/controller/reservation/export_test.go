package reservation

import "context"

// Sync is one sync of reservation name, for tests that fill the
// controller's caches by hand.
func (c *Controller) Sync(ctx context.Context, name string) error { return c.sync(ctx, name) }
