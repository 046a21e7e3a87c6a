package integration

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// lossyProxy serves the API at a URL of its own and forwards every request
// to the server of upstream, with upstream's credentials (none: the
// caller's own headers go through), except what lose answers itself: a
// network that loses answers. It returns a client configuration for the
// proxy, without credentials.
func lossyProxy(t *testing.T, upstream *rest.Config, lose func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool) *rest.Config {
	t.Helper()
	target, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.Transport = transport
	forward.FlushInterval = -1 // watches stream
	p := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !lose(w, req, forward) {
			forward.ServeHTTP(w, req)
		}
	}))
	t.Cleanup(p.Close)
	return &rest.Config{Host: p.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Certificate().Raw})}}
}

// loseAnswer forwards req and, whatever the server answered, answers 504,
// as a load balancer that gave up on a slow answer; it returns the
// server's status code.
func loseAnswer(w http.ResponseWriter, req *http.Request, forward http.Handler) int {
	answer := httptest.NewRecorder()
	forward.ServeHTTP(answer, req)
	answerStatus(w, http.StatusGatewayTimeout, "Timeout", "the answer was lost")
	return answer.Code
}

// answerStatus answers as the server refuses: a metav1.Status of code,
// reason and message.
func answerStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message})
}

// rewriter rewrites what a handler writes, one write at a time: the
// server's answers, as a party between it and its client could.
type rewriter struct {
	http.ResponseWriter
	from *regexp.Regexp
	to   []byte
}

func (r *rewriter) WriteHeader(code int) {
	r.Header().Del("Content-Length")
	r.ResponseWriter.WriteHeader(code)
}

func (r *rewriter) Write(p []byte) (int, error) {
	if _, err := r.ResponseWriter.Write(r.from.ReplaceAll(p, r.to)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (r *rewriter) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *rewriter) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// unavailableFor is a proxy of s's API that answers 503 to the requests
// of method whose path ends with suffix, and forwards the rest.
func unavailableFor(t *testing.T, s *testserver.Server, method, suffix string) *rest.Config {
	t.Helper()
	return lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
			if req.Method == method && strings.HasSuffix(req.URL.Path, suffix) {
				answerStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the store is not reachable")
				return true
			}
			return false
		})
}
