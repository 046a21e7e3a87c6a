// Package standin starts a stand-in for nodus-server's port in tests of
// Nodus' clients (nodusd, the heartbeat stream's client): an HTTP/2 server
// over TLS, as the real port, whose handler fails as a network, a proxy or
// an older server would. Tests against nodus-server itself use the real
// server (pkg/testserver); a stand-in is for what it is not brought to on
// demand.
package standin

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// Serve serves h until the test ends, and returns a clientset of it,
// already connected: a timeout a test measures is its request's, not the
// TLS handshake's. h's requests must end before the test does (the server
// waits for them), and h must answer 404 for paths it does not serve.
func Serve(t testing.TB, h http.Handler) versioned.Interface {
	t.Helper()
	clients, err := versioned.NewForConfig(Config(t, h))
	if err != nil {
		t.Fatal(err)
	}
	if err := clients.NodusV1().RESTClient().Get().AbsPath("/connect").Do(context.Background()).Error(); !apierrors.IsNotFound(err) {
		t.Fatalf("connecting to the stand-in: %v", err)
	}
	return clients
}

// Config serves h as Serve does, and returns a client configuration of it,
// for a test of the client a program makes of its own configuration.
func Config(t testing.TB, h http.Handler) *rest.Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}
