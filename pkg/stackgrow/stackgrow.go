// Package stackgrow grows a goroutine's stack early, while it is shallow.
//
// A goroutine starts with a small stack and the runtime copies it to one
// twice the size whenever a call does not fit, adjusting every frame on it.
// The API's request goroutines (one from the HTTP/2 server, one from the
// generic chain's timeout filter) each grew several times, the later times
// 40 to 60 frames deep: 12 % of a server's CPU serving GETs was stack
// copying. Growing once at the top of such a goroutine copies a few frames
// instead; the same profile then had 8 % in stack growth, Grow's included
// (docs/performance.md, "Request stacks grown early"). CockroachDB does the
// same (util/growstack).
package stackgrow

import "net/http"

// Size is how much free stack Grow makes sure of. A request goroutine grown
// by it has a 64 KB stack, and most requests never grow it again.
const Size = 32 << 10

// Grow makes sure the calling goroutine has about Size bytes of stack free,
// in one copy of its stack if it has not.
//
//go:noinline
func Grow() {
	var frame [Size]byte
	keep(frame[:])
}

// keep makes the compiler keep the frame: it cannot see that keep does not
// read it. It writes nowhere, so concurrent requests share nothing.
//
//go:noinline
func keep([]byte) {}

// Handler grows the stack of each request's goroutine before next runs,
// but a long-running one's (a watch, a heartbeat stream): its goroutine
// lives as long as the request, and a stack grown to 64 KB stays that size
// for a handler parked as deep as the generic chain's, since the runtime
// halves a stack only when less than a quarter of it is in use. 30,000
// agents' watches held 1.9 GB of such stacks (docs/performance.md, "Agents'
// watches alongside their beats"); grown by the runtime as it needs, a
// long-running request's stack copies cost it once.
func Handler(next http.Handler, longRunning func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !longRunning(r) {
			Grow()
		}
		next.ServeHTTP(w, r)
	})
}
