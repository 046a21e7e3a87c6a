package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// postHostAction takes an action of host h — send makes the typed call —
// fenced by the host's ETag as the caller reviewed it, and retries what may
// be retried: one Idempotency-Key for all tries makes that safe (the first
// answer comes back).
func postHostAction(ctx context.Context, h *nodusv1.ReservedHost, action string, attempts int, progress io.Writer,
	send func(context.Context) error) error {
	ctx = withHeaders(ctx, http.Header{"If-Match": {`"` + h.ResourceVersion + `"`}, "Idempotency-Key": {uuid.NewString()}})
	for attempt := 1; ; attempt++ {
		err := send(ctx)
		if err == nil {
			return nil
		}
		if !retriable(err) || attempt >= attempts {
			return err
		}
		fmt.Fprintf(progress, "retrying %s (%s)\n", action, oneLine(err))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// headersKey carries request headers the typed client has no parameter for.
type headersKey struct{}

// withHeaders makes every request sent with ctx carry h.
func withHeaders(ctx context.Context, h http.Header) context.Context {
	return context.WithValue(ctx, headersKey{}, h)
}

// contextHeaders adds the headers of withHeaders to a request.
type contextHeaders struct{ next http.RoundTripper }

func (t contextHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	h, _ := req.Context().Value(headersKey{}).(http.Header)
	if len(h) == 0 {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range h {
		req.Header[k] = v
	}
	return t.next.RoundTrip(req)
}

// retriable says whether a failed action may be sent again with the same
// key: what may succeed unchanged (transient), and a first try with that
// key still running; not a caller's bound of kept keys, which seconds do
// not lift.
func retriable(err error) bool {
	return (transient(err) && !reasonIs(err, "TooManyIdempotencyKeys")) || reasonIs(err, "IdempotencyKeyInFlight")
}
