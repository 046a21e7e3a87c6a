package project

import (
	"context"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// EmptyPausing runs one round of emptying p, calling pause as each step is
// about to write, where a leader that paused and lost its lead would resume.
func (c *Controller) EmptyPausing(ctx context.Context, p *nodusv1.Project, pause func(step string)) (string, error) {
	c.paused = pause
	defer func() { c.paused = nil }()
	return c.empty(ctx, p)
}

// ErrReplaced is errReplaced.
var ErrReplaced = errReplaced
