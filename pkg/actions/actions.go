// Package actions gives action subresources (POSTs that do something once,
// such as release-capacity) their HTTP contract: 200 OK rather than the
// generic handler's 201, and Idempotency-Key replay backed by etcd.
package actions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/idempotency"
)

const (
	headerKey      = "Idempotency-Key"
	headerReplayed = "Idempotent-Replayed"
	maxKeyLength   = 255
	// DefaultBodyLimit bounds an action's request body: actions take a few
	// fields, not documents.
	DefaultBodyLimit = 64 << 10
	// MaxAnswer bounds a stored answer; a larger one is not kept (the
	// request may then not be replayed, and is not stored either).
	MaxAnswer = 64 << 10
	// DefaultKeysPerCaller bounds the answers one caller keeps stored per
	// project (and outside projects) at a time, for their 24 hours.
	DefaultKeysPerCaller = 1000
)

// Options shape the actions.
type Options struct {
	// BodyLimits are the action subresources ("resource/subresource") and
	// the most bytes each takes in a request body (0: DefaultBodyLimit).
	BodyLimits map[string]int64
	// KeysPerCaller bounds each caller's stored answers (0: DefaultKeysPerCaller).
	KeysPerCaller int
	// PerProject says whether a caller's records are kept (and bounded)
	// per project its paths name: a member's, whom the authorizer holds to
	// its projects. Any other caller (a node's agent, which names the
	// project of any execution on its host, or an enrollment token) keeps
	// its records under one prefix, bounded once, whatever its paths name.
	// Nil: every caller's are.
	PerProject func(user.Info) bool
}

// WithActions wraps handler for the action subresources of opts. It must
// run after authentication and request info, so that keys are scoped to
// the caller.
func WithActions(handler http.Handler, store *idempotency.Store, opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest || info.Verb != "create" {
			handler.ServeHTTP(w, req)
			return
		}
		limit, isAction := opts.BodyLimits[info.Resource+"/"+info.Subresource]
		if !isAction {
			handler.ServeHTTP(w, req)
			return
		}
		if limit <= 0 {
			limit = DefaultBodyLimit
		}
		w = responsewriter.WrapForHTTP1Or2(&okWriter{ResponseWriter: w})
		// Refuse an oversized body before reading it, or as soon as it is
		// known to be one: nothing of it is kept or decoded.
		tooLarge := func() {
			apierror.Write(w, apierror.New(req.Context(), metav1.StatusReasonRequestEntityTooLarge, gr(info), info.Name,
				fmt.Sprintf("the body of %s/%s takes at most %d bytes", info.Resource, info.Subresource, limit), ""))
		}
		if req.ContentLength > limit {
			tooLarge()
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
		if err != nil {
			apierror.Write(w, apierrors.NewBadRequest("reading the request body: "+err.Error()))
			return
		}
		if int64(len(body)) > limit {
			tooLarge()
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		keys := req.Header.Values(headerKey)
		if len(keys) == 0 || req.URL.Query().Has("dryRun") {
			// A dry run keeps no record: it changes nothing to protect.
			handler.ServeHTTP(w, req)
			return
		}
		key, ok := parseKey(keys)
		if !ok {
			apierror.Write(w, apierror.New(req.Context(), apierror.ReasonIdempotencyKeyInvalid, gr(info), info.Name,
				"Idempotency-Key must be one key of 1 to 255 visible ASCII characters, as a token or a quoted string", ""))
			return
		}
		keysPerCaller := opts.KeysPerCaller
		if keysPerCaller <= 0 {
			keysPerCaller = DefaultKeysPerCaller
		}
		prefixPath := req.URL.Path
		if u, ok := request.UserFrom(req.Context()); ok && opts.PerProject != nil && !opts.PerProject(u) {
			prefixPath = ""
		}
		serveOnce(w, req, handler, store, info, key, body, keysPerCaller, prefixPath)
	})
}

// serveOnce serves a request with an Idempotency-Key. Its record is kept
// under the caller's prefix for prefixPath's project (CallerPrefix).
func serveOnce(w http.ResponseWriter, req *http.Request, handler http.Handler, store *idempotency.Store, info *request.RequestInfo, key string,
	body []byte, keysPerCaller int, prefixPath string) {
	ctx := req.Context()
	user := ""
	if u, ok := request.UserFrom(ctx); ok {
		user = u.GetName()
	}
	scope := CallerPrefix(user, prefixPath) + digest(user, req.Method, req.URL.Path, key)
	fingerprint := Fingerprint(req.URL.RawQuery, body)

	// A retry of a kept answer is always served; a new key only while the
	// caller keeps fewer answers than its bound (a count, then a claim: a
	// burst of concurrent new keys may pass the bound by its size).
	existing, err := store.Get(ctx, scope)
	if err != nil {
		apierror.Write(w, apierrors.NewInternalError(err))
		return
	}
	if existing == nil {
		kept, err := store.Count(ctx, CallerPrefix(user, prefixPath))
		if err != nil {
			apierror.Write(w, apierrors.NewInternalError(err))
			return
		}
		if kept >= int64(keysPerCaller) {
			// No Retry-After: the bound frees up as the oldest answers
			// expire, not at a time the server keeps, and client-go waits
			// out a 429's Retry-After and sends again, ten times over.
			apierror.Write(w, apierror.New(ctx, apierror.ReasonTooManyIdempotencyKeys, gr(info), info.Name,
				fmt.Sprintf("%s keeps %d answers of Idempotency-Keys here, the most a caller may; they are kept 24 hours", user, kept), ""))
			return
		}
		existing, err = store.Begin(ctx, scope, fingerprint)
	}
	if err != nil {
		apierror.Write(w, apierrors.NewInternalError(err))
		return
	}
	switch {
	case existing == nil:
	case existing.Fingerprint != fingerprint:
		apierror.Write(w, apierror.New(ctx, apierror.ReasonIdempotencyKeyReused, gr(info), info.Name,
			"Idempotency-Key "+quote(key)+" was used for a different request (other body or query)", ""))
		return
	case existing.InFlight():
		// A request cut by its replica's crash runs again at once; one
		// still running elsewhere is waited for.
		taken, err := store.TakeOver(ctx, scope, existing)
		if err != nil {
			apierror.Write(w, apierrors.NewInternalError(err))
			return
		}
		if taken {
			break
		}
		w.Header().Set("Retry-After", "1")
		inFlight := apierror.New(ctx, apierror.ReasonIdempotencyKeyInFlight, gr(info), info.Name,
			"the first request with Idempotency-Key "+quote(key)+" is still running", "")
		inFlight.ErrStatus.Details.RetryAfterSeconds = 1
		apierror.Write(w, inFlight)
		return
	default:
		replay(w, req, existing)
		return
	}

	// A handler that panics settles nothing: its record is no longer
	// renewed, and ends with its lease, as a crashed replica's does.
	defer store.Release(scope)

	// The answer is held until it is stored: a client that saw it gets it
	// again on a retry, even if this replica dies the moment after.
	held := &heldWriter{ResponseWriter: w}
	req = req.WithContext(context.WithValue(ctx, requestKeyContext{}, scope))
	handler.ServeHTTP(responsewriter.WrapForHTTP1Or2(held), req)
	defer held.release()

	// The answer is kept even if the client went away: that is the point.
	// A failed action's key is released before its answer goes out, so
	// that the client's retry finds it free; while etcd refuses writes
	// (electing a leader), the answer waits for the release, at most until
	// the in-flight record's lease ends it.
	done := context.WithoutCancel(ctx)
	if held.code == 0 || retryLater(held.code) || decidedByHeaders(held.code) || held.passed {
		if err := store.Abandon(done, scope); err != nil {
			klog.ErrorS(err, "releasing an idempotency key after a failed action", "path", req.URL.Path)
		}
		return
	}
	ex := exchange.From(ctx)
	record := idempotency.Record{
		Fingerprint: fingerprint, Code: held.code, Body: held.body.Bytes(),
		RequestID: ex.RequestID(), Header: map[string]string{}, Fix: ex.Fix(),
	}
	// What the action set through the exchange (an ETag) reaches the
	// response only when it is written, after this: it is taken from there.
	set := http.Header{}
	ex.CopyResponseHeaders(set)
	for _, h := range []string{"Content-Type", "ETag", "Retry-After", headerReplayed} {
		if v := w.Header().Get(h); v != "" {
			record.Header[h] = v
		} else if v := set.Get(h); v != "" {
			record.Header[h] = v
		}
	}
	if err := store.Finish(done, scope, record); err != nil {
		// The effect happened: its answer still goes out, but a retry
		// runs the action again (and recognises its effect, where the
		// action records its key).
		klog.ErrorS(err, "storing an idempotent answer", "path", req.URL.Path)
		_ = store.Abandon(done, scope)
	}
}

// retryLater says whether an answer of code tells the client to try again
// rather than what became of its request: a server error, a timeout, or a
// 429 (a watch cache still filling, a limit for now). Such an answer is not
// the key's: kept, every retry would get it for 24 hours and the action
// never finish, even one whose first part took effect (the retry runs it
// again and the action recognises that part as its own).
func retryLater(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// decidedByHeaders says whether an answer of code was decided by a header
// the fingerprint leaves out (If-Match, Content-Type, Accept), before any
// effect: kept, it was replayed for a day to the corrected retry its own
// fix asks for (read the host again, send its new ETag).
func decidedByHeaders(code int) bool {
	return code == http.StatusPreconditionFailed || code == http.StatusUnsupportedMediaType || code == http.StatusNotAcceptable
}

type requestKeyContext struct{}

// RequestKey is the reference to the Idempotency-Key record of the action
// being served ("" without a key). An action whose effect is not naturally
// repeatable stores it with the effect, so that a retry that runs again
// after a crash cut the first answer recognises the effect as its own
// (Recognizer). It is a digest of the record's key (ScopeKey), and names no
// caller: the record's key begins with a digest of the caller's name,
// unsalted, and a Reservation, where actions store it, is read by its
// node's agent, whose credential a tenant with root on the host may have
// copied (docs/security.md): a dictionary of names told it who released or
// lent the host before.
func RequestKey(ctx context.Context) string {
	scope, _ := ctx.Value(requestKeyContext{}).(string)
	if scope == "" {
		return ""
	}
	return EffectRef(scope)
}

// EffectRef is the RequestKey of the request whose record key is scope.
func EffectRef(scope string) string { return "r-" + digest(scope) }

// Recognizer says which references stored with an effect are the action's
// own: its RequestKey, or its record's key itself, which servers before
// session 51 stored (their records are kept 24 hours). It recognises none
// without an Idempotency-Key.
func Recognizer(ctx context.Context) func(ref string) bool {
	scope, _ := ctx.Value(requestKeyContext{}).(string)
	if scope == "" {
		return func(string) bool { return false }
	}
	own := EffectRef(scope)
	return func(ref string) bool { return ref == own || ref == scope }
}

// MarkReplayed says, from an action, that its answer is that of an earlier
// request with the same Idempotency-Key, whose effect it recognised.
func MarkReplayed(ctx context.Context) {
	exchange.From(ctx).SetResponseHeader(headerReplayed, "true")
}

// AuditReplayOf is the audit annotation of a replayed answer: the request
// id (and audit id) of the request that produced it.
const AuditReplayOf = "nodus.dev/idempotent-replay-of"

// replay writes the first answer again, marked as a replay. An error body
// names the request that produced it.
func replay(w http.ResponseWriter, req *http.Request, r *idempotency.Record) {
	for k, v := range r.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set(headerReplayed, "true")
	// In the audit log a replay reads as the action done again: it names
	// the request whose answer it is.
	audit.AddAuditAnnotation(req.Context(), AuditReplayOf, r.RequestID)
	exchange.From(req.Context()).SetRequestID(r.RequestID)
	// The first answer's own fix, not the reason's general one.
	exchange.From(req.Context()).SetFix(r.Fix)
	w.WriteHeader(r.Code)
	_, _ = w.Write(r.Body)
}

// parseKey accepts one key, raw (token characters) or as a quoted string.
func parseKey(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	k := strings.TrimSpace(values[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
		if strings.ContainsAny(k, `"\`) {
			return "", false
		}
		for _, c := range k {
			if c < 0x20 || c > 0x7e {
				return "", false
			}
		}
	} else {
		for _, c := range k {
			if !isTokenChar(c) {
				return "", false
			}
		}
	}
	return k, len(k) >= 1 && len(k) <= maxKeyLength
}

// isTokenChar is RFC 9110's tchar.
func isTokenChar(c rune) bool {
	return c < 0x7f && (c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.ContainsRune("!#$%&'*+-.^_`|~", c))
}

// ScopeKey is the record key of an Idempotency-Key: keys are scoped to the
// caller, the method and the path, and kept under the caller's prefix
// (CallerPrefix) so that its answers can be counted. Records of a
// project's objects are kept under the project's name, so that they go
// with the project.
func ScopeKey(user, method, path, key string) string {
	return CallerPrefix(user, path) + digest(user, method, path, key)
}

// CallerPrefix is where user's records for path's project (or outside
// projects) are kept.
func CallerPrefix(user, path string) string {
	caller := "u-" + digest(user)[:32] + "/"
	if _, rest, ok := strings.Cut(path, "/namespaces/"); ok {
		if ns, _, ok := strings.Cut(rest, "/"); ok && ns != "" {
			return ns + "/" + caller
		}
	}
	return caller
}

// Fingerprint identifies a request's query and body, to tell a retry from a
// different request under the same key.
func Fingerprint(rawQuery string, body []byte) string {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return digest(rawQuery, string(body))
	}
	return digest(q.Encode(), string(body))
}

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func quote(k string) string { return `"` + k + `"` }

func gr(info *request.RequestInfo) schema.GroupResource {
	return schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
}

// okWriter answers 200 where the generic create handler says 201: an action
// creates nothing.
type okWriter struct {
	http.ResponseWriter
}

func (w *okWriter) WriteHeader(code int) {
	if code == http.StatusCreated {
		code = http.StatusOK
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *okWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// heldWriter keeps the answer back until release, so that it can be
// stored first. An answer larger than MaxAnswer is not kept: it is passed
// through as soon as it is known to be one.
type heldWriter struct {
	http.ResponseWriter
	code     int
	body     bytes.Buffer
	passed   bool // written through, not kept
	released bool
}

func (w *heldWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *heldWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if !w.passed && w.body.Len()+len(p) <= MaxAnswer {
		return w.body.Write(p)
	}
	if !w.passed {
		w.passed = true
		w.ResponseWriter.WriteHeader(w.code)
		if _, err := w.ResponseWriter.Write(w.body.Bytes()); err != nil {
			return 0, err
		}
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends nothing while the answer is held.
func (w *heldWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.passed {
		f.Flush()
	}
}

// release writes the held answer.
func (w *heldWriter) release() {
	if w.passed || w.released || w.code == 0 {
		return
	}
	w.released = true
	w.ResponseWriter.WriteHeader(w.code)
	_, _ = w.ResponseWriter.Write(w.body.Bytes())
}

func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
