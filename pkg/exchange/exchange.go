// Package exchange carries, through a request's context, what REST code deep
// in the apiserver needs of the HTTP exchange that the generic handlers do not
// pass down: request headers (If-Match, Idempotency-Key, User-Agent), response
// headers to add (ETag, Retry-After), the fix of an error, and the request id
// an error body must name.
package exchange

import (
	"context"
	"net/http"
	"sync"
)

type key struct{}

// Exchange is one request's notes. Its methods are safe on a nil receiver,
// which stands for a context without an exchange.
type Exchange struct {
	request http.Header

	mu        sync.Mutex
	response  http.Header
	fix       string
	reason    string
	requestID string
}

// With returns ctx carrying a new exchange for a request with header h.
func With(ctx context.Context, h http.Header, requestID string) (context.Context, *Exchange) {
	e := &Exchange{request: h, response: http.Header{}, requestID: requestID}
	return context.WithValue(ctx, key{}, e), e
}

// From returns the exchange of ctx, or nil.
func From(ctx context.Context) *Exchange {
	e, _ := ctx.Value(key{}).(*Exchange)
	return e
}

// RequestHeader returns a header of the request.
func (e *Exchange) RequestHeader(name string) string {
	if e == nil {
		return ""
	}
	return e.request.Get(name)
}

// RequestHeaderValues returns every value of a request header.
func (e *Exchange) RequestHeaderValues(name string) []string {
	if e == nil {
		return nil
	}
	return e.request.Values(name)
}

// SetResponseHeader adds a header to the response, when it is written.
func (e *Exchange) SetResponseHeader(name, value string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.response.Set(name, value)
}

// CopyResponseHeaders copies the headers set so far into h.
func (e *Exchange) CopyResponseHeaders(h http.Header) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, v := range e.response {
		h[k] = v
	}
}

// SetFix records the next step for the caller of a failing request.
func (e *Exchange) SetFix(fix string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fix = fix
}

// Fix returns the fix recorded by SetFix.
func (e *Exchange) Fix() string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fix
}

// SetReason names the registered reason of a refusal decided where only a
// message can be returned (an authorizer's denial): the error body carries
// it instead of the generic reason of the status code.
func (e *Exchange) SetReason(reason string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reason = reason
}

// Reason returns the reason recorded by SetReason.
func (e *Exchange) Reason() string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reason
}

// SetRequestID makes error bodies name id instead of this request's own id:
// a replayed response names the request that produced it.
func (e *Exchange) SetRequestID(id string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requestID = id
}

// RequestID is the id error bodies name.
func (e *Exchange) RequestID() string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requestID
}
