// Package heartbeatpath serves the common heartbeat — an agent's plain
// POST /apis/nodus.dev/v1/nodes/{name}/heartbeat — ahead of the generic
// handler chain. At 10,000 nodes a server takes a thousand beats a second,
// and the generic chain's per-request work (tracing, audit evaluation,
// impersonation, the timeout goroutine, routing, negotiation, versioned
// decoding) cost more than the beat itself.
//
// The lean path runs the same authenticator, the same authorizer (the node
// restriction), the same admission and the same HeartbeatREST. It takes a
// request only when nothing in it needs the rest of the chain; anything else
// goes down the generic chain unchanged and is answered there: a query
// string, impersonation, an Idempotency-Key, another media type, a body over
// the limit or one the strict decoder refuses, a caller that does not
// authenticate or is not allowed, an audit policy that records heartbeats,
// a full in-flight limit, a server shutting down. So every refusal keeps
// its generic answer and reason.
//
// It also serves agents' heartbeat streams (stream.go), whose every beat it
// takes by the same code.
package heartbeatpath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	utilwaitgroup "k8s.io/apimachinery/pkg/util/waitgroup"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kjson "sigs.k8s.io/json"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
)

const (
	prefix   = "/apis/" + nodusv1.GroupName + "/v1/nodes/"
	resource = "nodes"
	sub      = "heartbeat"
	// createTimeout is the generic create handler's bound on a request
	// (k8s.io/apiserver's requestTimeoutUpperBound), which a beat keeps.
	createTimeout = 34 * time.Second
)

var served = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
	Name:           "nodus_heartbeat_lean_requests_total",
	Help:           "Heartbeats answered by the lean path ahead of the generic handler chain, by HTTP code; the others are in apiserver_request_total.",
	StabilityLevel: compbasemetrics.ALPHA,
}, []string{"code"})

var openStreams = compbasemetrics.NewGauge(&compbasemetrics.GaugeOpts{
	Name:           "nodus_heartbeat_streams",
	Help:           "Heartbeat streams open on this server: agents that beat over one long-lived request each.",
	StabilityLevel: compbasemetrics.ALPHA,
})

func init() { legacyregistry.MustRegister(served, openStreams) }

// Options are the parts of the server the lean path shares with the generic chain.
type Options struct {
	Authenticator authenticator.Request
	// APIAudiences are the generic chain's; with any set, beats take the generic path.
	APIAudiences authenticator.Audiences
	Authorizer   authorizer.Authorizer
	// AuditBackend and AuditPolicy decide whether a beat is recorded; one
	// that is takes the generic path, which records it.
	AuditBackend audit.Backend
	AuditPolicy  audit.PolicyRuleEvaluator
	Admission    admission.Interface
	Scheme       *runtime.Scheme
	Serializer   runtime.NegotiatedSerializer
	// Timeout bounds a beat, as the generic chain's request timeout does
	// (and at most as its create handler does, 34 s): reading the body
	// included, so that a body that never comes holds neither a slot nor
	// the server's shutdown.
	Timeout time.Duration
	// MaxInFlight bounds the beats served at once, plain and on streams
	// together; beyond it a plain beat goes down the generic chain, whose
	// in-flight limit answers it, and a stream's beat waits a moment for a
	// slot, then is answered 429 (its agent sends it as a request). It is
	// a share of the server's mutating limit, which the generic chain gets
	// the rest of (LeanShare); 0 sends every beat down the generic chain,
	// and refuses streams. The beats of streams run on as many workers.
	MaxInFlight int
	// WaitGroup is the generic server's non-long-running requests, which
	// shutdown waits for.
	WaitGroup *utilwaitgroup.SafeWaitGroup
	// BodyLimit is the most bytes the lean path reads of a body, and of a
	// beat on a stream.
	BodyLimit int64
	// Interval is the agents' heartbeat interval: a stream without a beat
	// for heartbeatstream.IdleLimit of it ends.
	Interval time.Duration
	// Envelope completes a Status a stream's beat fails with, as the
	// envelope filter completes an error response (envelope.Complete).
	Envelope func(req *http.Request, ex *exchange.Exchange, code int, s metav1.Status, retryAfter int) any
}

// Filter serves plain heartbeats and passes everything else to Next.
type Filter struct {
	next     http.Handler
	opts     Options
	inflight chan struct{}
	beats    atomic.Pointer[rest.NamedCreater]
	objects  admission.ObjectInterfaces
	// encoder writes a stream's answers, in JSON.
	encoder runtime.Encoder
	streams streams
	// workers starts the workers that run the streams' beats, once.
	workers sync.Once
}

// New returns the filter in front of next. Until Serve names the heartbeat
// storage, every request goes to next.
func New(next http.Handler, opts Options) *Filter {
	f := &Filter{next: next, opts: opts, objects: admission.NewObjectInterfacesFromScheme(opts.Scheme)}
	if info, ok := runtime.SerializerInfoForMediaType(opts.Serializer.SupportedMediaTypes(), runtime.ContentTypeJSON); ok {
		f.encoder = opts.Serializer.EncoderForVersion(info.Serializer, gv)
	}
	if opts.MaxInFlight > 0 {
		f.inflight = make(chan struct{}, opts.MaxInFlight)
	}
	return f
}

// LeanShare splits the server's limit on mutating requests in flight
// between the lean path (lean) and the generic chain (generic), so that
// beats do not add to it: a quarter of it, none below 4 (every beat takes
// the generic chain). With no limit (0) the generic chain has none, and
// the lean path 200 at once.
func LeanShare(limit int) (lean, generic int) {
	if limit <= 0 {
		return 200, limit
	}
	return limit / 4, limit - limit/4
}

// Serve sets the storage that takes the beats: the same the generic chain
// installs at nodes/heartbeat.
func (f *Filter) Serve(beats rest.NamedCreater) { f.beats.Store(&beats) }

var gv = nodusv1.SchemeGroupVersion

func (f *Filter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	name, tail, ok := plainBeat(req)
	beats := f.beats.Load()
	if ok && beats != nil && tail == heartbeatstream.Subresource {
		// The generic chain serves no stream: the lean path answers every
		// opening it authenticates and the authorizer allows, if only
		// with why it does not serve it.
		if !f.serveStream(w, req, name, *beats) {
			f.next.ServeHTTP(w, req)
		}
		return
	}
	if !ok || beats == nil || len(f.opts.APIAudiences) > 0 || f.inflight == nil || !f.serveInSlot(w, req, name, *beats) {
		f.next.ServeHTTP(w, req)
	}
}

// serveInSlot serves a plain beat in one of the lean path's in-flight
// slots, or says that the generic chain is to: no slot is free (its own
// limit answers), the server is shutting down (it says so), or serve did
// not take the beat. The slot is free again before the generic chain runs:
// a beat the lean path declines holds none of its share there, which the
// streams' beats wait for.
func (f *Filter) serveInSlot(w http.ResponseWriter, req *http.Request, name string, beats rest.NamedCreater) bool {
	select {
	case f.inflight <- struct{}{}:
		defer func() { <-f.inflight }()
	default:
		return false
	}
	if f.opts.WaitGroup != nil {
		if err := f.opts.WaitGroup.Add(1); err != nil {
			return false
		}
		defer f.opts.WaitGroup.Done()
	}
	return f.serve(w, req, name, beats)
}

// serve answers the beat, or says that it did not touch w and that the
// generic chain is to answer it (with req's body as it came).
func (f *Filter) serve(w http.ResponseWriter, req *http.Request, name string, beats rest.NamedCreater) (taken bool) {
	// As the generic chain's panic filter: a 500, not a dropped connection.
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			utilruntime.HandleError(fmt.Errorf("heartbeat of %s panicked: %v", name, r))
			code := responsewriters.ErrorNegotiated(apierrors.NewInternalError(fmt.Errorf("the heartbeat failed")), f.opts.Serializer, gv, w, req)
			served.WithLabelValues(fmt.Sprint(code)).Inc()
			taken = true
		}
	}()
	deadline := time.Now().Add(f.timeout())
	resp, ok, err := f.opts.Authenticator.AuthenticateRequest(req)
	if err != nil || !ok {
		return false
	}
	ctx, attrs := beatAttributes(req, resp.User, name)
	if f.audited(attrs) || !f.allowed(ctx, attrs) {
		return false
	}
	// The body is read by the deadline: the generic chain's timeout filter
	// answers a body that never comes, and releases shutdown's wait.
	body, err := readBy(w, req, deadline, f.opts.BodyLimit)
	if errors.Is(err, errCannotBound) {
		return false
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		code := responsewriters.ErrorNegotiated(apierrors.NewTimeoutError("the request's body did not arrive within its deadline", 0), f.opts.Serializer, gv, w, req)
		served.WithLabelValues(fmt.Sprint(code)).Inc()
		return true
	}
	if err != nil || int64(len(body)) > f.opts.BodyLimit {
		req.Body = replay(body, req.Body)
		return false
	}
	beat, lax, err := f.decode(body)
	if err != nil || lax {
		req.Body = replay(body, req.Body)
		return false
	}

	req = req.WithContext(ctx)
	w.Header().Set(auditinternal.HeaderAuditID, req.Header.Get(auditinternal.HeaderAuditID))
	if _, set := w.Header()["Cache-Control"]; !set {
		w.Header().Set("Cache-Control", "no-cache, private")
	}
	code := f.answer(w, req, name, beat, beats, deadline)
	served.WithLabelValues(fmt.Sprint(code)).Inc()
	return true
}

// timeout is how long a beat may take, the generic create handler's bound
// at most.
func (f *Filter) timeout() time.Duration {
	if f.opts.Timeout <= 0 {
		return createTimeout
	}
	return min(f.opts.Timeout, createTimeout)
}

// errCannotBound says that the connection takes no read deadline.
var errCannotBound = errors.New("the connection takes no read deadline")

// readBy reads at most limit+1 bytes of req's body, giving up at deadline
// (os.ErrDeadlineExceeded). A connection that cannot be given a read
// deadline is not read from (errCannotBound).
func readBy(w http.ResponseWriter, req *http.Request, deadline time.Time, limit int64) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(deadline); err != nil {
		return nil, errCannotBound
	}
	// The connection outlives the request (keep-alive): lift the deadline
	// after the body, or it would cut the next request on it.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	return io.ReadAll(io.LimitReader(req.Body, limit+1))
}

// beatAttributes is the context and the authorization attributes of u's
// heartbeat of node name, as the generic chain makes them for
// POST nodes/{name}/heartbeat.
func beatAttributes(req *http.Request, u user.Info, name string) (context.Context, authorizer.AttributesRecord) {
	path := prefix + name + "/" + sub
	info := &request.RequestInfo{IsResourceRequest: true, Path: path, Verb: "create", APIPrefix: "apis",
		APIGroup: gv.Group, APIVersion: gv.Version, Resource: resource, Subresource: sub, Name: name,
		Parts: []string{resource, name, sub}}
	attrs := authorizer.AttributesRecord{User: u, Verb: "create", APIGroup: gv.Group, APIVersion: gv.Version,
		Resource: resource, Subresource: sub, Name: name, ResourceRequest: true, Path: path}
	// The generic create handler names the (empty, cluster-wide) namespace.
	return request.WithNamespace(request.WithRequestInfo(request.WithUser(req.Context(), u), info), ""), attrs
}

// audited says whether the audit policy records a beat with attrs: the
// generic chain records it, and the lean path leaves it to it.
func (f *Filter) audited(attrs authorizer.AttributesRecord) bool {
	return f.opts.AuditBackend != nil && f.opts.AuditPolicy != nil && f.opts.AuditPolicy.EvaluatePolicyRule(attrs).Level != auditinternal.LevelNone
}

// allowed says whether the authorizer allows the beat.
func (f *Filter) allowed(ctx context.Context, attrs authorizer.AttributesRecord) bool {
	decision, _, err := f.opts.Authorizer.Authorize(ctx, attrs)
	return err == nil && decision == authorizer.DecisionAllow
}

// decode reads a beat's body as the generic create handler does: a
// NodeHeartbeat of this version (or of no stated type), defaulted, and
// handed on without its type. lax says that it decoded only leniently
// (unknown or duplicate fields), which the generic handler takes with a
// warning.
func (f *Filter) decode(body []byte) (beat *nodusv1.NodeHeartbeat, lax bool, err error) {
	beat = &nodusv1.NodeHeartbeat{}
	strict, err := kjson.UnmarshalStrict(body, beat)
	switch {
	case err != nil:
		return nil, false, err
	case beat.APIVersion != "" && beat.APIVersion != gv.String():
		return nil, false, fmt.Errorf("apiVersion %q is not %s", beat.APIVersion, gv)
	case beat.Kind != "" && beat.Kind != "NodeHeartbeat":
		return nil, false, fmt.Errorf("kind %q is not NodeHeartbeat", beat.Kind)
	}
	f.opts.Scheme.Default(beat)
	beat.TypeMeta = metav1.TypeMeta{}
	return beat, len(strict) > 0, nil
}

// answer runs the beat and writes the result as the generic create handler
// writes it (200 for an action).
func (f *Filter) answer(w http.ResponseWriter, req *http.Request, name string, beat *nodusv1.NodeHeartbeat, beats rest.NamedCreater, deadline time.Time) int {
	out, err := f.create(req.Context(), name, beat, beats, deadline)
	if err != nil {
		return responsewriters.ErrorNegotiated(err, f.opts.Serializer, gv, w, req)
	}
	responsewriters.WriteObjectNegotiated(f.opts.Serializer, negotiation.DefaultEndpointRestrictions, gv, w, req, http.StatusOK, out, false)
	return http.StatusOK
}

// create runs the beat through admission and the storage, by deadline.
func (f *Filter) create(ctx context.Context, name string, beat *nodusv1.NodeHeartbeat, beats rest.NamedCreater, deadline time.Time) (runtime.Object, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	options := &metav1.CreateOptions{}
	user, _ := request.UserFrom(ctx)
	attrs := admission.NewAttributesRecord(beat, nil, nodusv1.Kind("NodeHeartbeat").WithVersion(gv.Version), "", name,
		gv.WithResource(resource), sub, admission.Create, options, false, user)
	if m, ok := f.opts.Admission.(admission.MutationInterface); ok && m.Handles(admission.Create) {
		if err := m.Admit(ctx, attrs, f.objects); err != nil {
			return nil, err
		}
	}
	validate := rest.AdmissionToValidateObjectFunc(f.opts.Admission, attrs, f.objects)
	out, err := beats.Create(ctx, name, beat, validate, options)
	if err != nil && ctx.Err() != nil {
		// As the generic create handler words a request past its bound.
		err = apierrors.NewTimeoutError(fmt.Sprintf("request did not complete within requested timeout - %s", ctx.Err()), 0)
	}
	return out, err
}

// plainBeat says whether req is a heartbeat, or the opening of a heartbeat
// stream (tail), that needs nothing of the generic chain but what the lean
// path runs, and of which node.
func plainBeat(req *http.Request) (name, tail string, ok bool) {
	if req.Method != http.MethodPost || req.URL.RawQuery != "" {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(req.URL.Path, prefix)
	name, tail, found := strings.Cut(rest, "/")
	if !ok || !found || (tail != sub && tail != heartbeatstream.Subresource) || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", false
	}
	// Agents beat with their certificate. A bearer token (or no
	// credential) goes down the generic chain: one the lean path declined
	// would be looked up twice.
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 || req.Header.Get("Authorization") != "" {
		return "", "", false
	}
	for key := range req.Header {
		if strings.HasPrefix(key, "Impersonate-") || key == "Idempotency-Key" || key == "Content-Encoding" {
			return "", "", false
		}
	}
	if mediaType, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return "", "", false
	}
	switch strings.ReplaceAll(req.Header.Get("Accept"), " ", "") {
	case "", "*/*", "application/json", "application/json,*/*":
	default:
		return "", "", false
	}
	return name, tail, true
}

// replay is the body as it came: what was read, then the rest.
func replay(read []byte, rest io.ReadCloser) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(read), rest), rest}
}
