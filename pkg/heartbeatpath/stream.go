package heartbeatpath

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
)

// A heartbeat stream (package heartbeatstream) carries a node's beats, a
// line each way, over one long-lived request. Every beat on it is
// authenticated, authorized, decoded, admitted and stored as a plain beat
// on the lean path is, by the same code; what the stream saves is the
// request around each beat. Its opening is taken as a plain beat is, and
// anything the lean path does not take (no certificate, an identity the
// authorizer refuses, impersonation, a query) goes down the generic chain,
// which serves no stream and answers why.

// streams are the open heartbeat streams: one per node (a new one ends the
// node's older one, which its agent left behind), and the workers that run
// their beats.
type streams struct {
	mu      sync.Mutex
	open    map[string]*openStream
	stopped bool

	init sync.Once
	// work takes the beats the workers run, and stop, closed by Stop, ends
	// the workers (work is never closed: a stream may be sending).
	work chan func()
	stop chan struct{}
}

// started makes the channels once.
func (s *streams) started() (work chan func(), stop chan struct{}) {
	s.init.Do(func() {
		s.work, s.stop = make(chan func()), make(chan struct{})
	})
	return s.work, s.stop
}

type openStream struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// add registers a stream of node for a request with context parent. It
// returns false once the server stops.
func (s *streams) add(parent context.Context, node string) (*openStream, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, false
	}
	if s.open == nil {
		s.open = map[string]*openStream{}
	}
	if old := s.open[node]; old != nil {
		old.cancel()
	}
	ctx, cancel := context.WithCancel(parent)
	o := &openStream{ctx: ctx, cancel: cancel}
	s.open[node] = o
	openStreams.Inc()
	return o, true
}

// remove drops o, node's stream, unless a newer one replaced it.
func (s *streams) remove(node string, o *openStream) {
	o.cancel()
	openStreams.Dec()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[node] == o {
		delete(s.open, node)
	}
}

// Stop ends every heartbeat stream and refuses new ones: the server shuts
// down, and agents beat the next replica (or this one as it comes back).
// Shutdown waits for non-long-running requests only, and a stream waits
// for its next beat, up to IdleLimit: without this it would hold the
// listener's shutdown until its agent wrote.
func (f *Filter) Stop() {
	s := &f.streams
	_, stop := s.started()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	for _, o := range s.open {
		o.cancel()
	}
	close(stop)
}

// errBusy says that no in-flight slot came free for a stream's beat within
// slotWait.
var errBusy = errors.New("no in-flight slot came free")

// run runs job on one of the filter's MaxInFlight workers, and waits for
// it. A beat runs deep (admission, storage, etcd's client), and would grow
// the stack of every stream's goroutine; the workers' stacks grow once.
// The job holds one of the lean path's in-flight slots, as a plain beat
// does, so that the beats of streams and of requests together stay within
// the lean path's share of the server's limit. It waits slotWait for one at
// most (errBusy), and returns ctx's error, or errStopped, when the stream or
// the server ended before a worker took the job.
func (f *Filter) run(ctx context.Context, job func()) error {
	work, stop := f.streams.started()
	if !f.takeSlot(ctx, stop) {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-stop:
			return errStopped
		default:
			return errBusy
		}
	}
	defer func() { <-f.inflight }()
	f.workers.Do(func() {
		for range cap(f.inflight) {
			go func() {
				for {
					select {
					case j := <-work:
						j()
					case <-stop:
						return
					}
				}
			}()
		}
	})
	done := make(chan struct{})
	select {
	case work <- func() { defer close(done); job() }:
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errStopped
	}
	<-done
	return nil
}

// takeSlot takes one of the lean path's in-flight slots, waiting slotWait
// at most (no timer when one is free, as it is but under load).
func (f *Filter) takeSlot(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case f.inflight <- struct{}{}:
		return true
	default:
	}
	wait := time.NewTimer(f.slotWait())
	defer wait.Stop()
	select {
	case f.inflight <- struct{}{}:
		return true
	case <-wait.C:
	case <-ctx.Done():
	case <-stop:
	}
	return false
}

// errStopped says that the server stopped.
var errStopped = errors.New("the server is shutting down")

// slotWait is how long a stream's beat waits for an in-flight slot: a
// quarter of the heartbeat interval, a second at most. Its agent waits half
// an interval (1 to 10 s) for the answer; a beat that waited longer than
// this is answered 429, and the agent sends it as a request, which meets
// the generic chain's limit (and client-go's retries) as every other.
func (f *Filter) slotWait() time.Duration {
	if f.opts.Interval <= 0 {
		return time.Second
	}
	return min(time.Second, f.opts.Interval/4)
}

// idleLimit is how long a stream waits for its next beat.
func (f *Filter) idleLimit() time.Duration {
	return heartbeatstream.IdleLimit(f.opts.Interval)
}

// serveStream serves a heartbeat stream of node name, or says that it did
// not touch w and that the generic chain is to answer the request (one the
// authenticator or the authorizer does not pass).
func (f *Filter) serveStream(w http.ResponseWriter, req *http.Request, name string, beats rest.NamedCreater) bool {
	resp, ok, err := f.opts.Authenticator.AuthenticateRequest(req)
	if err != nil || !ok {
		return false
	}
	ctx, attrs := beatAttributes(req, resp.User, name)
	if !f.allowed(ctx, attrs) {
		return false
	}
	switch {
	case len(f.opts.APIAudiences) > 0 || f.inflight == nil || f.encoder == nil || f.opts.Envelope == nil:
		f.refuse(w, req, name, "this server takes heartbeats as requests only (it has API audiences, or no share of its in-flight limit for heartbeats)")
		return true
	case f.audited(attrs):
		// The audit log has an event for every beat sent as a request; a
		// stream's beats would have one for the stream.
		f.refuse(w, req, name, "this server's audit policy records every heartbeat, which it does for heartbeats sent as requests only")
		return true
	}
	rc := http.NewResponseController(w)
	if req.ProtoMajor < 2 {
		if err := rc.EnableFullDuplex(); err != nil {
			f.refuse(w, req, name, "a heartbeat stream needs HTTP/2, or an HTTP/1.1 connection that reads and writes at once, which this one cannot")
			return true
		}
	}
	open, ok := f.streams.add(req.Context(), name)
	if !ok {
		code := responsewriters.ErrorNegotiated(apierrors.NewServiceUnavailable("the server is shutting down"), f.opts.Serializer, gv, w, req)
		served.WithLabelValues(strconv.Itoa(code)).Inc()
		return true
	}
	defer f.streams.remove(name, open)
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			// The answer's status is sent: end the stream, as a
			// request's panic ends it.
			utilruntime.HandleError(fmt.Errorf("heartbeat stream of %s panicked: %v", name, r))
		}
	}()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return true
	}
	// A stream that ends (a newer one of its node, the server's stop)
	// stops waiting for its next beat. The request's own end cancels it
	// too, and x/net/http2 panics on a deadline set once the handler
	// returned: the stop is fenced by done.
	var fence sync.Mutex
	done := false
	stop := context.AfterFunc(open.ctx, func() {
		fence.Lock()
		defer fence.Unlock()
		if !done {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
	defer func() {
		stop()
		fence.Lock()
		done = true
		fence.Unlock()
	}()
	in := bufio.NewReaderSize(req.Body, 1<<10)
	requestID := w.Header().Get("X-Request-Id")
	// A refusal names the heartbeat's path: its fix is a heartbeat's.
	asBeat := beatRequestOf(req, name)
	for seq := 1; ; seq++ {
		// The idle limit runs from the last beat: lines with nothing in
		// them do not keep a stream open.
		if err := rc.SetReadDeadline(time.Now().Add(f.idleLimit())); err != nil {
			return true
		}
		var line []byte
		for len(bytes.TrimSpace(line)) == 0 {
			if open.ctx.Err() != nil { // after the deadline is set: a stop before it would be lost
				return true
			}
			line, err = readLine(in, f.opts.BodyLimit)
			if errors.Is(err, errLineTooLong) {
				_, ex := exchange.With(open.ctx, req.Header, requestID+"-"+strconv.Itoa(seq))
				f.writeLine(w, rc, asBeat, ex, apierrors.NewRequestEntityTooLargeError(
					fmt.Sprintf("a heartbeat on the stream is over %d bytes; the stream ends", f.opts.BodyLimit)))
				return true
			}
			if err != nil {
				return true // the agent closed it, or went quiet past the idle limit
			}
		}
		// x/net/http2 ends the request's body when a read deadline passes,
		// read or not: none while the beat runs.
		if err := rc.SetReadDeadline(time.Time{}); err != nil {
			return true
		}
		ctx, ex := exchange.With(open.ctx, req.Header, requestID+"-"+strconv.Itoa(seq))
		var answer any
		var end bool
		switch err := f.run(open.ctx, func() { answer, end = f.streamBeat(ctx, req, name, line, beats) }); {
		case errors.Is(err, errBusy):
			answer = apierrors.NewTooManyRequests("the server serves as many heartbeats at once as it may; send this one as a request", 1)
			ex.SetFix("Send this heartbeat as POST /apis/nodus.dev/v1/nodes/" + name + "/heartbeat (nodusd does so by itself), and the next ones on the stream.")
		case err != nil:
			return true
		}
		if !f.writeLine(w, rc, asBeat, ex, answer) || end {
			return true
		}
	}
}

// beatRequestOf is req, a stream of node name, as a POST of one of its beats.
func beatRequestOf(req *http.Request, name string) *http.Request {
	beat := *req
	u := *req.URL
	u.Path, u.RawPath = prefix+name+"/"+sub, ""
	beat.URL = &u
	return &beat
}

// refuse answers the opening of a stream that this server does not serve
// for the caller: 405, with why, and heartbeats as requests as what to do.
func (f *Filter) refuse(w http.ResponseWriter, req *http.Request, name, why string) {
	err := apierror.New(req.Context(), metav1.StatusReasonMethodNotAllowed, gv.WithResource(resource).GroupResource(), name,
		"heartbeat streams are not served: "+why,
		"Send each heartbeat as POST /apis/nodus.dev/v1/nodes/"+name+"/heartbeat (nodusd does so by itself when its stream is refused).")
	code := responsewriters.ErrorNegotiated(err, f.opts.Serializer, gv, w, req)
	served.WithLabelValues(strconv.Itoa(code)).Inc()
}

// streamBeat takes one beat of a stream, as the lean path takes a plain
// beat: authenticated again (a certificate may expire, or be revoked, while
// the stream is open), authorized again (the node restriction: a newer
// generation retires this one), decoded strictly, admitted and stored. It
// returns the answer, or the error, and whether the stream ends after it:
// when the caller's credential no longer passes, or the server shuts down.
// ctx carries the beat's exchange, whose request id is the stream's,
// numbered.
func (f *Filter) streamBeat(ctx context.Context, req *http.Request, name string, line []byte, beats rest.NamedCreater) (answer any, end bool) {
	if f.opts.WaitGroup != nil {
		if err := f.opts.WaitGroup.Add(1); err != nil {
			return apierrors.NewServiceUnavailable("the server is shutting down; the stream ends"), true
		}
		defer f.opts.WaitGroup.Done()
	}
	// On a worker, where no HTTP server recovers: every panic, the
	// aborting one too, ends the stream with a 500.
	defer func() {
		if r := recover(); r != nil {
			utilruntime.HandleError(fmt.Errorf("heartbeat of %s panicked: %v", name, r))
			answer, end = apierrors.NewInternalError(fmt.Errorf("the heartbeat failed")), true
		}
	}()
	deadline := time.Now().Add(f.timeout())
	resp, ok, err := f.opts.Authenticator.AuthenticateRequest(req)
	if err != nil || !ok {
		return apierrors.NewUnauthorized("the stream's credential no longer authenticates; the stream ends"), true
	}
	ctx, attrs := beatAttributes(req.WithContext(ctx), resp.User, name)
	decision, why, err := f.opts.Authorizer.Authorize(ctx, attrs)
	if err != nil {
		return apierrors.NewInternalError(err), true
	}
	if decision != authorizer.DecisionAllow {
		return apierrors.NewForbidden(gv.WithResource(resource+"/"+sub).GroupResource(), name,
			fmt.Errorf("%s; the stream ends", why)), true
	}
	beat, _, err := f.decode(line) // a field it does not know: a warning, which a stream has no place for
	if err != nil {
		return apierrors.NewBadRequest("the heartbeat does not decode: " + err.Error()), false
	}
	out, err := f.create(ctx, name, beat, beats, deadline)
	if err != nil {
		return err, false
	}
	return out, false
}

// writeLine writes one answer line: an object, or an error as the
// envelope's Status. False when the stream cannot be written to.
func (f *Filter) writeLine(w http.ResponseWriter, rc *http.ResponseController, req *http.Request, ex *exchange.Exchange, answer any) bool {
	var body []byte
	var err error
	code := http.StatusOK
	switch a := answer.(type) {
	case error:
		status := responsewriters.ErrorToAPIStatus(a)
		code = int(status.Code)
		headers := http.Header{}
		ex.CopyResponseHeaders(headers)
		retryAfter, _ := strconv.Atoi(headers.Get("Retry-After"))
		body, err = json.Marshal(f.opts.Envelope(req, ex, code, *status, retryAfter))
	case runtime.Object:
		body, err = runtime.Encode(f.encoder, a)
	default:
		err = fmt.Errorf("no answer")
	}
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("encoding a heartbeat stream's answer: %w", err))
		return false
	}
	if !bytes.HasSuffix(body, []byte("\n")) {
		body = append(body, '\n')
	}
	served.WithLabelValues(strconv.Itoa(code)).Inc()
	if err := rc.SetWriteDeadline(time.Now().Add(f.timeout())); err != nil {
		return false
	}
	if _, err := w.Write(body); err != nil {
		return false
	}
	// A deadline left set would reset the stream between beats.
	return rc.Flush() == nil && rc.SetWriteDeadline(time.Time{}) == nil
}

// errLineTooLong says that a stream's line is over the body limit.
var errLineTooLong = errors.New("the line is too long")

// readLine reads one line of in, up to limit bytes (errLineTooLong beyond).
func readLine(in *bufio.Reader, limit int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := in.ReadSlice('\n')
		if int64(len(line)+len(chunk)) > limit+1 {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return line, nil // the last beat, without its newline
		default:
			return nil, err
		}
	}
}
