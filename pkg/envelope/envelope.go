// Package envelope is the outermost HTTP filter of nodus-server. It gives
// every request an id (X-Request-Id, also used as the audit id) and turns
// every error response, whichever layer wrote it, into the Status envelope:
// a metav1.Status with a registered reason plus docs, fix and requestId.
package envelope

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/apierror"
	"github.com/nodus-dev/nodus/pkg/exchange"
)

// HeaderRequestID is sent on every response.
const HeaderRequestID = "X-Request-Id"

// Status is the error body of every API response: a metav1.Status plus three
// top-level extensions that kubectl and client-go ignore.
type Status struct {
	metav1.Status `json:",inline"`
	// Docs is the URL of the code's docs page.
	Docs string `json:"docs,omitempty"`
	// Fix says what to do next, for example a CLI command or the field to change.
	Fix string `json:"fix,omitempty"`
	// RequestID identifies the request in logs and support tickets.
	RequestID string `json:"requestId,omitempty"`
}

// Options configure the filter.
type Options struct {
	// DocsBaseURL is the prefix of docs URLs; empty means this server's own
	// /docs/errors on the host the client used.
	DocsBaseURL string
	// Resolver names the resource of a request for request-specific fixes.
	Resolver request.RequestInfoResolver
	// Formats write the envelope in another API's error format for the
	// paths they claim (the Ironic API's, for one).
	Formats []Format
	// RequestTimeout is the server's bound of a request other than a watch
	// (--request-timeout): the deadline of one that names none (?timeout=)
	// and the most one may name, as the library's deadline filter sets it.
	RequestTimeout time.Duration
}

// Format writes errors for the paths Match accepts.
type Format struct {
	Match func(path string) bool
	Write func(w http.ResponseWriter, code int, s Status)
}

// maxErrorBody bounds what the filter buffers of an error response; error
// bodies are small, and anything larger is replaced by a summary.
const maxErrorBody = 1 << 20

// WithEnvelope wraps handler.
func WithEnvelope(handler http.Handler, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := uuid.NewString()
		w.Header().Set(HeaderRequestID, id)
		// The apiserver's audit filter takes its id from this header, so the
		// audit log and the error body name the same request.
		req.Header.Set("Audit-ID", id)
		ctx, ex := exchange.With(req.Context(), req.Header, id)
		req = req.WithContext(ctx)

		ew := &errorWriter{ResponseWriter: w, exchange: ex, start: time.Now()}
		defer func() {
			if r := recover(); r != nil && (r != http.ErrAbortHandler || !ew.abortedTimeout(req, opts)) {
				panic(r)
			}
		}()
		// The wrapper keeps CloseNotifier, Flusher and Hijacker of w visible,
		// as the apiserver's watch and upgrade handlers need them.
		handler.ServeHTTP(responsewriter.WrapForHTTP1Or2(ew), req)
		if ew.code >= 400 {
			ew.writeEnvelope(req, opts)
		}
	})
}

// errorWriter passes successful responses through untouched and holds back
// the body of an error response so that it can be rewritten.
type errorWriter struct {
	http.ResponseWriter
	exchange *exchange.Exchange
	code     int
	body     bytes.Buffer
	start    time.Time // when the request arrived
}

func (w *errorWriter) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	w.exchange.CopyResponseHeaders(w.ResponseWriter.Header())
	if code < 400 {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *errorWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.code < 400 {
		return w.ResponseWriter.Write(p)
	}
	if w.body.Len()+len(p) <= maxErrorBody {
		w.body.Write(p)
	}
	return len(p), nil
}

// Flush keeps watch streams working; error bodies are only written at the end.
func (w *errorWriter) Flush() {
	if w.code != 0 && w.code < 400 {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// Unwrap implements responsewriter.UserProvidedDecorator.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *errorWriter) writeEnvelope(req *http.Request, opts Options) {
	status := Status{}
	// Some writers (the request-timeout filter among them) send a Status
	// without its kind; recognise a Status by its failure marker too.
	isStatus := decodeStatus(w.body.Bytes(), w.Header().Get("Content-Type"), &status) &&
		(status.Kind == "Status" || status.Status.Status == metav1.StatusFailure)
	if !isStatus {
		// Some layers (rate limiting, panic recovery, deadlines) answer in
		// plain text; keep their words as the message.
		status = Status{Status: metav1.Status{Message: strings.TrimSpace(w.body.String())}}
	}
	if w.code == http.StatusInternalServerError && status.Message == context.DeadlineExceeded.Error() && deadlinePassed(req, w.start, opts.RequestTimeout) {
		// The request's own deadline passed, and its handler answered with
		// the error its store read returned then before the library's
		// timeout filter answered 504 (the two race): the same timeout, in
		// the filter's words.
		w.code, status.Status = http.StatusGatewayTimeout, timedOut()
	}
	retryAfter, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	status = Complete(req, w.exchange, w.code, status.Status, retryAfter, opts)
	w.code = int(status.Code)

	for _, f := range opts.Formats {
		if f.Match(req.URL.Path) {
			w.ResponseWriter.Header().Del("Content-Length")
			f.Write(w.ResponseWriter, w.code, status)
			return
		}
	}
	body, err := json.Marshal(status)
	if err != nil {
		body = []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`)
	}
	h := w.ResponseWriter.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.ResponseWriter.WriteHeader(w.code)
	_, _ = w.ResponseWriter.Write(body)
}

// abortedTimeout answers, as the 504 it is, a request the library's
// timeout filter aborted: its deadline passed after its handler had begun
// an error answer, which the filter cannot replace and so aborts (an
// HTTP/2 stream reset, a cut HTTP/1 connection). That answer is held back
// here and has reached no one. It says whether it answered: an abort of
// anything else (an answer already going out, a deadline not passed)
// stays one.
func (w *errorWriter) abortedTimeout(req *http.Request, opts Options) bool {
	if w.code < 400 || !deadlinePassed(req, w.start, opts.RequestTimeout) {
		return false
	}
	body, err := json.Marshal(timedOut())
	if err != nil {
		return false
	}
	// The filter took the handler's writer away when it timed out: nothing
	// writes here any more.
	w.code = http.StatusGatewayTimeout
	w.body.Reset()
	w.body.Write(body)
	w.Header().Set("Content-Type", "application/json")
	w.writeEnvelope(req, opts)
	return true
}

// timedOut is the library's timeout, as its timeout filter words it.
func timedOut() metav1.Status {
	return metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonTimeout, Code: http.StatusGatewayTimeout, Message: "Timeout: request did not complete within the allotted timeout"}
}

// deadlinePassed says whether the deadline of req, which arrived at start,
// has passed: its ?timeout=, at most timeout, else timeout (the library's
// request-deadline filter). An unknown bound (0) has not passed.
func deadlinePassed(req *http.Request, start time.Time, timeout time.Duration) bool {
	if v := req.URL.Query().Get("timeout"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 && (timeout <= 0 || d < timeout) {
			timeout = d
		}
	}
	return timeout > 0 && time.Since(start) >= timeout
}

// Complete makes s, an error answered with code to req, the envelope every
// error response gets: its registered reason (the one the request's
// exchange ex names, when registered with that code), message, docs link,
// fix and request id. retryAfter is the answer's Retry-After, in seconds (0:
// none). Streams whose lines carry errors (an agent's heartbeat stream)
// complete each with it, as this filter completes a response.
func Complete(req *http.Request, ex *exchange.Exchange, code int, s metav1.Status, retryAfter int, opts Options) Status {
	status := Status{Status: s}
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	status.Status.Status = metav1.StatusFailure
	if code >= 500 && strings.Contains(status.Message, rpctypes.ErrNoSpace.Error()) {
		// etcd's quota, which the library answers as any storage error
		// (500): the caller did nothing wrong, and nothing but room made
		// in the store lets a write pass again.
		code, status.Reason = http.StatusInsufficientStorage, apierror.ReasonStorageFull
		status.Message = "the server's storage is full and takes no writes until room is made: " + status.Message
	}
	status.Code = int32(code)

	if r := metav1.StatusReason(ex.Reason()); r != "" && apierror.IsRegistered(r) && apierror.Lookup(r, code).Code == code {
		status.Reason = r
	}
	reason := apierror.Lookup(status.Reason, code)
	status.Reason = reason.Name
	if status.Message == "" {
		status.Message = reason.Summary
	}
	status.RequestID = ex.RequestID()
	status.Docs = apierror.DocsURL(docsBase(req, opts.DocsBaseURL), reason.Name)
	status.Fix = ex.Fix()
	if status.Fix == "" {
		status.Fix = reason.Fix(describe(req, opts.Resolver))
	}
	if retryAfter > 0 {
		if status.Details == nil {
			status.Details = &metav1.StatusDetails{}
		}
		if status.Details.RetryAfterSeconds == 0 {
			status.Details.RetryAfterSeconds = int32(retryAfter)
		}
	}
	return status
}

// protobufMagic starts every protobuf body of the apiserver library: a
// runtime.Unknown that wraps the object.
var protobufMagic = []byte("k8s\x00")

// decodeStatus reads the Status an inner layer wrote, in the media type the
// client negotiated: JSON, YAML, or protobuf for clients that ask for it.
func decodeStatus(body []byte, contentType string, status *Status) bool {
	mediaType, _, _ := mime.ParseMediaType(contentType)
	switch mediaType {
	case runtime.ContentTypeYAML:
		return yaml.Unmarshal(body, status) == nil
	case runtime.ContentTypeProtobuf:
	default:
		return json.Unmarshal(body, status) == nil
	}
	var unknown runtime.Unknown
	if !bytes.HasPrefix(body, protobufMagic) || unknown.Unmarshal(body[len(protobufMagic):]) != nil {
		return false
	}
	if err := status.Status.Unmarshal(unknown.Raw); err != nil {
		return false
	}
	status.TypeMeta = metav1.TypeMeta{Kind: unknown.Kind, APIVersion: unknown.APIVersion}
	return true
}

func docsBase(req *http.Request, configured string) string {
	if configured != "" {
		return configured
	}
	return "https://" + req.Host + "/docs/errors"
}

func describe(req *http.Request, resolver request.RequestInfoResolver) apierror.Request {
	r := apierror.Request{Path: req.URL.Path}
	if resolver == nil {
		return r
	}
	info, err := resolver.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return r
	}
	r.Verb, r.Resource, r.Subresource, r.Namespace, r.Name = info.Verb, info.Resource, info.Subresource, info.Namespace, info.Name
	return r
}
