package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// postHostAction POSTs body to an action of host h, fenced by the host's
// ETag as the caller reviewed it, and retries what may be retried: one
// Idempotency-Key for all tries makes that safe (the first answer comes back).
func postHostAction(ctx context.Context, c versioned.Interface, h *nodusv1.ReservedHost, action string, body []byte,
	dryRun bool, attempts int, progress io.Writer, into runtime.Object) error {
	key := uuid.NewString()
	for attempt := 1; ; attempt++ {
		req := c.NodusV1().RESTClient().Post().Namespace(h.Namespace).Resource("reservedhosts").Name(h.Name).SubResource(action).
			SetHeader("Content-Type", "application/json").
			SetHeader("If-Match", `"`+h.ResourceVersion+`"`).
			SetHeader("Idempotency-Key", key).
			Body(body)
		if dryRun {
			req = req.Param("dryRun", "All")
		}
		err := req.Do(ctx).Into(into)
		if err == nil {
			return nil
		}
		if !retriable(err) || attempt >= attempts {
			return err
		}
		fmt.Fprintf(progress, "retrying %s (%v)\n", action, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// retriable says whether a failed action may be sent again with the same key.
func retriable(err error) bool {
	return !isAPIError(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsInternalError(err) || reasonIs(err, "IdempotencyKeyInFlight")
}
