// Package loopback carries the server's requests to itself as calls of its
// own handler chain: no TLS, no HTTP/2 framing, no sockets. The controllers
// write through the API like any client, so authentication, admission,
// audit and every filter see their requests as before; what a request over
// the network adds on top of that (encrypting and framing it on both ends,
// and the system calls) buys nothing when client and server are one
// process (docs/performance.md).
package loopback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"sync"

	"k8s.io/klog/v2"
)

// RemoteAddr is where the handler sees a loopback request come from, as it
// did over the network: the audit log's source IP.
const RemoteAddr = "127.0.0.1:0"

// errAborted is what the client reads when the handler aborted its answer
// (a panic, a timeout after the answer began), as a reset stream over HTTP/2.
var errAborted = errors.New("loopback: the handler aborted the response")

// errClosed is what a handler's write returns once the client closed the
// body: the client has gone, as a closed connection over the network.
var errClosed = errors.New("loopback: the client closed the response body")

// Transport is an http.RoundTripper that serves each request with Handler
// in this process, on a goroutine of its own, as the HTTP server would.
type Transport struct {
	Handler http.Handler
}

// RoundTrip serves req and returns once the handler has written the
// response's header; the body streams as the handler writes it, so a watch
// works as over the network.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	in := serverRequest(ctx, req)
	pr, pw := io.Pipe()
	w := &responseWriter{request: in, header: http.Header{}, body: pw,
		headerDone: make(chan struct{}), failed: make(chan struct{}), closed: make(chan bool, 1)}
	w.response = &http.Response{
		Proto: in.Proto, ProtoMajor: in.ProtoMajor, ProtoMinor: in.ProtoMinor,
		Body: &responseBody{PipeReader: pr, cancel: cancel, w: w}, Request: req,
	}
	go t.serve(w, in, req, pw, cancel)
	select {
	case <-w.headerDone:
		return w.response, nil
	case <-w.failed:
		cancel()
		return nil, errAborted
	case <-req.Context().Done():
		// Gone before the answer, as a client that resets its stream: the
		// handler's context ends and its writes fail.
		cancel()
		_ = pr.CloseWithError(errClosed)
		return nil, req.Context().Err()
	}
}

// serve runs the handler as net/http's server does: it recovers a panic
// (http.ErrAbortHandler without a word), sends a header the handler did not
// write, closes the request body, and ends the request's context once the
// handler has returned.
func (t *Transport) serve(w *responseWriter, in, req *http.Request, pw *io.PipeWriter, cancel context.CancelFunc) {
	defer func() {
		cancel()
		if req.Body != nil {
			_ = req.Body.Close()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				const size = 64 << 10
				stack := make([]byte, size)
				stack = stack[:runtime.Stack(stack, false)]
				klog.ErrorS(nil, "loopback: panic serving a request", "method", in.Method, "path", in.URL.Path, "panic", fmt.Sprint(v), "stack", string(stack))
			}
			w.abort()
			_ = pw.CloseWithError(errAborted)
			return
		}
		w.finish()
		_ = pw.Close()
	}()
	t.Handler.ServeHTTP(w, in)
}

// serverRequest is req as the server would have read it off the wire: a
// path-only URL, RequestURI and RemoteAddr set, HTTP/2 as the loopback
// client spoke before, and a body that is never nil.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	in := req.Clone(ctx)
	in.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	in.RequestURI = in.URL.RequestURI()
	in.RemoteAddr = RemoteAddr
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/2.0", 2, 0
	if in.Host == "" {
		in.Host = req.URL.Host
	}
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.Close = false
	return in
}

// responseWriter writes the response into a pipe the client's body reads.
// It implements http.Flusher and http.CloseNotifier, as HTTP/2's writer
// does: the generic chain's timeout filter and the watch handler test for
// them.
type responseWriter struct {
	request  *http.Request
	header   http.Header
	body     *io.PipeWriter
	response *http.Response

	mu          sync.Mutex
	wroteHeader bool
	aborted     bool
	headerDone  chan struct{} // closed once the response's header is written
	failed      chan struct{} // closed when the handler ended without one
	closed      chan bool
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(code)
}

func (w *responseWriter) writeHeaderLocked(code int) {
	// An informational header is not the response; the one after it is.
	if w.wroteHeader || w.aborted || (code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols) {
		return
	}
	w.wroteHeader = true
	w.response.StatusCode = code
	w.response.Status = strconv.Itoa(code) + " " + http.StatusText(code)
	w.response.Header = w.header.Clone()
	w.response.ContentLength = -1
	if n, err := strconv.ParseInt(w.response.Header.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		w.response.ContentLength = n
	}
	if !bodyAllowed(w.request.Method, code) {
		w.response.ContentLength = 0
	}
	close(w.headerDone)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if !w.wroteHeader {
		if w.header.Get("Content-Type") == "" && w.header.Get("Transfer-Encoding") == "" {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.writeHeaderLocked(http.StatusOK)
	}
	allowed := bodyAllowed(w.request.Method, w.response.StatusCode)
	w.mu.Unlock()
	if !allowed {
		return 0, http.ErrBodyNotAllowed
	}
	return w.body.Write(p)
}

// Flush sends the header if the handler has not; the body has no buffer
// to flush: each write reaches the client's read.
func (w *responseWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(http.StatusOK)
}

// CloseNotify reports the client closing the response body.
func (w *responseWriter) CloseNotify() <-chan bool { return w.closed }

// finish sends a header the handler never wrote, as net/http does.
func (w *responseWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(http.StatusOK)
}

// abort ends a response the handler could not finish: before its header,
// RoundTrip fails; after it, the client's next read does.
func (w *responseWriter) abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.wroteHeader {
		w.aborted = true
		close(w.failed)
	}
}

func bodyAllowed(method string, code int) bool {
	return method != http.MethodHead && code != http.StatusNoContent && code != http.StatusNotModified && (code < 100 || code > 199)
}

// responseBody is the client's end of the pipe. Closing it ends the
// request's context and fails the handler's further writes, as a closed
// connection would.
type responseBody struct {
	*io.PipeReader
	cancel context.CancelFunc
	w      *responseWriter
	once   sync.Once
}

func (b *responseBody) Close() error {
	b.once.Do(func() {
		_ = b.PipeReader.CloseWithError(errClosed)
		b.cancel()
		select {
		case b.w.closed <- true:
		default:
		}
	})
	return nil
}
