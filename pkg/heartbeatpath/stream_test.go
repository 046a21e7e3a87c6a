package heartbeatpath

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/exchange"
)

// These tests reach what the integration tests' servers cannot be brought
// to on demand: an opening while the server stops, a server with API
// audiences, a beat that panics on its worker. The filter's authenticator
// lets every certificate in as node n1's agent and its authorizer allows
// every beat: who may stream is the integration tests'
// (TestAHeartbeatStreamIsOpenedOnlyAsItsBeatsAreAllowed).

// beatStorage takes beats as the storage would, or runs create instead.
type beatStorage struct {
	create func()
}

func (beatStorage) New() runtime.Object { return &nodusv1.NodeHeartbeat{} }

func (s beatStorage) Create(_ context.Context, _ string, obj runtime.Object, _ rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	if s.create != nil {
		s.create()
	}
	return obj, nil
}

// streamFilter is a lean path in front of a generic chain that answers 418
// (nothing is to reach it here), with change applied to its options.
func streamFilter(t *testing.T, storage beatStorage, change func(*Options)) *Filter {
	t.Helper()
	return leanFilter(t, storage, change, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s %s reached the generic chain", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	}))
}

// leanFilter is a lean path in front of generic.
func leanFilter(t *testing.T, storage beatStorage, change func(*Options), generic http.Handler) *Filter {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	opts := Options{
		Scheme: scheme, Serializer: serializer.NewCodecFactory(scheme), BodyLimit: 1 << 10, MaxInFlight: 2, Interval: time.Second,
		Authenticator: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "nodus:agent:n1"}}, true, nil
		}),
		Authorizer: authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionAllow, "", nil
		}),
		Envelope: func(req *http.Request, ex *exchange.Exchange, code int, s metav1.Status, retryAfter int) any {
			return envelope.Complete(req, ex, code, s, retryAfter, envelope.Options{})
		},
	}
	if change != nil {
		change(&opts)
	}
	f := New(generic, opts)
	f.Serve(storage)
	t.Cleanup(f.Stop)
	return f
}

// opening is a stream's opening as an agent sends it over HTTP/2.
func opening() *http.Request {
	req := beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeatstream")
	req.Body = io.NopCloser(strings.NewReader(""))
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	return req
}

func statusOf(t *testing.T, w *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatalf("%d %q is not a Status: %v", w.Code, w.Body, err)
	}
	return s
}

// TestAStoppingServerRefusesStreams: after the pre-shutdown hook ended the
// streams, an opening that still arrives is told the server stops (503: the
// agent beats with requests, to the next replica), not kept open.
func TestAStoppingServerRefusesStreams(t *testing.T) {
	f := streamFilter(t, beatStorage{}, nil)
	f.Stop()
	w := httptest.NewRecorder()
	f.ServeHTTP(w, opening())
	if s := statusOf(t, w); w.Code != http.StatusServiceUnavailable || s.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("an opening after the stop: %d %s", w.Code, w.Body)
	}
}

// TestAServerWithAPIAudiencesRefusesStreams: with API audiences the lean
// path does not authenticate beats as the generic chain would, so it
// serves no stream and says so (405: the agent beats with requests).
func TestAServerWithAPIAudiencesRefusesStreams(t *testing.T) {
	f := streamFilter(t, beatStorage{}, func(o *Options) { o.APIAudiences = authenticator.Audiences{"nodus"} })
	w := httptest.NewRecorder()
	f.ServeHTTP(w, opening())
	if s := statusOf(t, w); w.Code != http.StatusMethodNotAllowed || s.Reason != metav1.StatusReasonMethodNotAllowed ||
		!strings.Contains(s.Message, "API audiences") {
		t.Errorf("an opening on a server with API audiences: %d %s", w.Code, w.Body)
	}
}

// TestABeatThatPanicsEndsItsStreamWithA500: a beat runs on a worker, where
// no HTTP server recovers a panic: the beat is answered 500, its stream
// ends, and the worker goes on serving the next stream's beats.
func TestABeatThatPanicsEndsItsStreamWithA500(t *testing.T) {
	var panics atomic.Bool
	f := streamFilter(t, beatStorage{create: func() {
		if panics.Load() {
			panic("the storage failed")
		}
	}}, func(o *Options) { o.MaxInFlight = 1 }) // one worker: the one that panicked serves the next beat
	srv, client := serveOverHTTP2(t, f)

	for i, want := range []int{http.StatusInternalServerError, http.StatusOK} {
		panics.Store(i == 0)
		in, answers := openOn(t, client, srv.URL)
		if code, answer := beatOn(t, in, answers); int(code) != want {
			t.Fatalf("stream %d: %d %+v, want %d", i+1, code, answer, want)
		}
		if want == http.StatusInternalServerError {
			// Well within the idle limit (13 s), which would end it too.
			ended := make(chan error, 1)
			go func() {
				_, err := answers.ReadBytes('\n')
				ended <- err
			}()
			select {
			case err := <-ended:
				if err == nil {
					t.Fatal("the stream answered again after the panic")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the stream did not end after the panic")
			}
		}
		in.Close()
	}
}

// serveOverHTTP2 serves h as nodus-server's port does (HTTP/2, TLS, client
// certificates), and returns a client with a certificate.
func serveOverHTTP2(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{clientCertificate(t)}
	return srv, client
}

// TestStreamsAndRequestsShareTheLeanLimit: the lean path's share of the
// server's in-flight limit bounds its beats, on streams and as requests
// together. With one slot, taken by a stream's beat, a plain beat goes down
// the generic chain (whose limit answers it), and the lean path never runs
// more beats at once than its share.
func TestStreamsAndRequestsShareTheLeanLimit(t *testing.T) {
	stored, release := make(chan struct{}), make(chan struct{})
	var storing atomic.Int32
	var generic atomic.Int32
	f := leanFilter(t, beatStorage{create: func() {
		if storing.Add(1) == 1 {
			stored <- struct{}{}
			<-release
		}
	}}, func(o *Options) { o.MaxInFlight = 1 }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		generic.Add(1)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	srv, client := serveOverHTTP2(t, f)
	t.Cleanup(func() { releaseOnce(release) }) // before the server's end, which waits for its handlers
	in, answers := openOn(t, client, srv.URL)
	if _, err := io.WriteString(in, `{"agentGeneration":1}`+"\n"); err != nil {
		t.Fatal(err)
	}
	within(t, stored, "the stream's beat's storage") // it holds the slot
	resp, err := client.Post(srv.URL+"/apis/nodus.dev/v1/nodes/n1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || generic.Load() != 1 {
		t.Errorf("a plain beat while a stream's beat held the lean path's one slot: %d, %d at the generic chain; want it sent there", resp.StatusCode, generic.Load())
	}
	releaseOnce(release)
	if _, err := answers.ReadBytes('\n'); err != nil {
		t.Fatalf("the stream's beat: %v", err)
	}
	// The slot is free again: the next plain beat is the lean path's.
	resp, err = client.Post(srv.URL+"/apis/nodus.dev/v1/nodes/n1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || generic.Load() != 1 {
		t.Errorf("a plain beat once the slot was free: %d, %d at the generic chain", resp.StatusCode, generic.Load())
	}
	in.Close()
}

// beatOn sends a beat on a stream and reads its answer: its code (200 for
// a NodeHeartbeat, the Status's otherwise) and the Status, if it is one.
func beatOn(t *testing.T, in io.Writer, answers *bufio.Reader) (int32, envelope.Status) {
	t.Helper()
	if _, err := io.WriteString(in, `{"agentGeneration":1}`+"\n"); err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte, 1)
	go func() {
		line, _ := answers.ReadBytes('\n')
		read <- line
	}()
	var line []byte
	select {
	case line = <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the beat was not answered in 10 s")
	}
	var answer envelope.Status
	if err := json.Unmarshal(line, &answer); err != nil {
		t.Fatalf("the answer %q: %v", line, err)
	}
	if answer.Kind != "Status" {
		return http.StatusOK, answer
	}
	return answer.Code, answer
}

// releaseOnce closes release unless the test did.
func releaseOnce(release chan struct{}) {
	select {
	case <-release:
	default:
		close(release)
	}
}

// within waits for ch, failing the test after 10 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not in 10 s", what)
	}
	var zero T
	return zero
}

// TestAStreamsBeatWithNoSlotIsAnswered429: a stream's beat waits a moment
// for an in-flight slot, not for as long as its agent waits for the answer
// (which would break the stream): then it is answered 429, as the generic
// chain answers a request over its limit, and the stream goes on.
func TestAStreamsBeatWithNoSlotIsAnswered429(t *testing.T) {
	stored, release := make(chan struct{}), make(chan struct{})
	var storing atomic.Int32
	f := streamFilter(t, beatStorage{create: func() {
		if storing.Add(1) == 1 {
			stored <- struct{}{}
			<-release
		}
	}}, func(o *Options) { o.MaxInFlight, o.Interval = 1, 400*time.Millisecond })
	srv, client := serveOverHTTP2(t, f)
	t.Cleanup(func() { releaseOnce(release) }) // before the server's end, which waits for its handlers
	posted := make(chan int, 1)
	go func() {
		resp, err := client.Post(srv.URL+"/apis/nodus.dev/v1/nodes/n1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`))
		if err != nil {
			posted <- 0
			return
		}
		resp.Body.Close()
		posted <- resp.StatusCode
	}()
	within(t, stored, "the plain beat's storage") // it holds the one slot
	in, answers := openOn(t, client, srv.URL)
	start := time.Now()
	code, busy := beatOn(t, in, answers)
	if code != http.StatusTooManyRequests || busy.Reason != metav1.StatusReasonTooManyRequests || busy.Details == nil ||
		busy.Details.RetryAfterSeconds != 1 || !strings.Contains(busy.Fix, "POST /apis/nodus.dev/v1/nodes/n1/heartbeat") {
		t.Errorf("a stream's beat while the one slot was taken: %d %+v, want 429 TooManyRequests, retry after 1 s, sent as a POST", code, busy)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the busy beat was answered after %s; its agent waits 200ms at this interval", took)
	}
	releaseOnce(release)
	if code := within(t, posted, "the plain beat's answer"); code != http.StatusOK {
		t.Errorf("the plain beat: %d", code)
	}
	if code, _ := beatOn(t, in, answers); code != http.StatusOK {
		t.Errorf("the stream's next beat, the slot free: %d", code)
	}
	in.Close()
}

// TestABeatTheLeanPathDeclinesHoldsNoSlot: a plain beat the lean path
// does not take (here one with a field it does not know) goes down the
// generic chain without one of the lean path's slots, which the streams'
// beats wait for.
func TestABeatTheLeanPathDeclinesHoldsNoSlot(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	f := leanFilter(t, beatStorage{}, func(o *Options) { o.MaxInFlight, o.Interval = 1, 400*time.Millisecond },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
	srv, client := serveOverHTTP2(t, f)
	t.Cleanup(func() { releaseOnce(release) }) // before the server's end, which waits for its handlers
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		resp, err := client.Post(srv.URL+"/apis/nodus.dev/v1/nodes/n1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1,"unknown":1}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	within(t, entered, "the declined beat in the generic chain")
	in, answers := openOn(t, client, srv.URL)
	if code, _ := beatOn(t, in, answers); code != http.StatusOK {
		t.Errorf("a stream's beat while a declined plain beat was in the generic chain: %d, want 200", code)
	}
	releaseOnce(release)
	within(t, posted, "the declined beat's answer")
	in.Close()
}

// openOn opens n1's stream on url, returning its request body's writer and
// its answers.
func openOn(t *testing.T, client *http.Client, url string) (*io.PipeWriter, *bufio.Reader) {
	t.Helper()
	r, w := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url+"/apis/nodus.dev/v1/nodes/n1/heartbeatstream", r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("the opening: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	return w, bufio.NewReader(resp.Body)
}

// clientCertificate is a self-signed client certificate: the filter takes
// only beats sent with one (its authenticator here takes any).
func clientCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
