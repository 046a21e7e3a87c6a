package heartbeatpath

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// beatRequest is a POST to path as an agent sends it: JSON, over TLS with
// a client certificate.
func beatRequest(path string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"agentGeneration":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}
	return req
}

// TestPlainBeatTakesOnlyAHeartbeat: the lean path must take nothing the
// generic chain routes elsewhere. nodes/heartbeat is a create of a Node
// named "heartbeat", not that node's beat.
func TestPlainBeatTakesOnlyAHeartbeat(t *testing.T) {
	for _, c := range []struct {
		name   string
		req    *http.Request
		node   string
		tail   string
		taken  bool
		change func(*http.Request)
	}{
		{name: "a beat", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat"), node: "n1", taken: true},
		{name: "nodes/heartbeat", req: beatRequest("/apis/nodus.dev/v1/nodes/heartbeat")},
		{name: "a deeper path", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/x/heartbeat")},
		{name: "a subresource of heartbeat", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat/x")},
		{name: "a trailing slash", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat/")},
		{name: "a query", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat?pretty=true")},
		{name: "a bearer token", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat"), change: func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }},
		{name: "no client certificate", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat"), change: func(r *http.Request) { r.TLS = nil }},
		{name: "a stream", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeatstream"), node: "n1", tail: "heartbeatstream", taken: true},
		{name: "a stream with a query", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeatstream?watch=true")},
		{name: "a stream with impersonation", req: beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeatstream"), change: func(r *http.Request) { r.Header.Set("Impersonate-User", "x") }},
	} {
		if c.change != nil {
			c.change(c.req)
		}
		if c.taken && c.tail == "" {
			c.tail = "heartbeat"
		}
		if node, tail, taken := plainBeat(c.req); taken != c.taken || node != c.node || tail != c.tail {
			t.Errorf("%s: taken %v for node %q (%q), want %v for %q (%q)", c.name, taken, node, tail, c.taken, c.node, c.tail)
		}
	}
}

// TestALeanBeatThatPanicsIsA500: the generic chain answers a panic with a
// 500 InternalError; the lean path dropped the connection when it came
// before the storage (the authenticator, the authorizer, the decoding).
func TestALeanBeatThatPanicsIsA500(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	f := New(http.NotFoundHandler(), Options{Scheme: scheme, Serializer: serializer.NewCodecFactory(scheme), BodyLimit: 1 << 10, MaxInFlight: 1,
		Authenticator: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { panic("the authenticator failed") })})
	f.Serve(nil)
	w := httptest.NewRecorder()
	f.ServeHTTP(w, beatRequest("/apis/nodus.dev/v1/nodes/n1/heartbeat"))
	var status metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &status); err != nil || w.Code != http.StatusInternalServerError || status.Reason != metav1.StatusReasonInternalError {
		t.Errorf("a panic in the lean path: %d %s", w.Code, w.Body)
	}
}

// TestLeanShareKeepsTheServersLimit: the beats the lean path takes count
// against the server's mutating limit, not on top of it.
func TestLeanShareKeepsTheServersLimit(t *testing.T) {
	for _, limit := range []int{1, 3, 4, 200, 1001} {
		lean, generic := LeanShare(limit)
		if lean < 0 || generic < 1 || lean+generic != limit || (limit >= 4 && lean < 1) {
			t.Errorf("limit %d: lean %d, generic %d", limit, lean, generic)
		}
	}
	if lean, generic := LeanShare(0); lean != 200 || generic != 0 {
		t.Errorf("no limit: lean %d, generic %d; want the generic chain unlimited and the lean path 200", lean, generic)
	}
}
