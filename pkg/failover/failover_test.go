package failover

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// closedURL is an https URL where nothing listens.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "https://" + addr
}

func TestServersParses(t *testing.T) {
	got, err := Servers(" https://a:8443, https://b:8443/ ,")
	if err != nil || len(got) != 2 || got[1] != "https://b:8443" {
		t.Errorf("Servers: %v %v", got, err)
	}
	for _, bad := range []string{"", "http://a:8443", "https://a:8443/api", "a:8443", "https://"} {
		if _, err := Servers(bad); err == nil {
			t.Errorf("Servers(%q) accepted", bad)
		}
	}
}

// TestAServerIsOnlyAnAddress: a server URL goes into command lines the CLI
// prints for a person to paste (nodusd enroll --server …, as root on a
// host; nodus login --server …), and client-go sends requests to it
// ignoring a fragment or taking a user part. A URL that is more than
// https://HOST[:PORT] carried a shell command through, as in
// https://a:8443#$(curl…|sh), which worked as a server all the same.
func TestAServerIsOnlyAnAddress(t *testing.T) {
	for _, good := range []string{"https://a:8443", "https://nodus-1.example.com", "https://10.0.0.1:8443",
		"https://[2001:db8::1]:8443", "https://api.example.com.:443/", "HTTPS://Nodus.Example.com:8443", "https://localhost:8443"} {
		if _, err := Servers(good); err != nil {
			t.Errorf("Servers(%q): %v", good, err)
		}
	}
	for _, bad := range []string{
		"https://a:8443#$(id)", "https://a:8443#", "https://a:8443?", "https://$(id)@a:8443", "https://u:p@a:8443",
		"https://a$(id):8443", "https://a;id:8443", "https://a`id`", "https://a'b", "https://a%20b:8443", "https:a:8443",
		"https://-oProxyCommand=x", "https://a:8443:1", "https://a:port", "https://a:", "https://a:99999", "https://[fe80::1%25eth0]:8443",
	} {
		if got, err := Servers(bad); err == nil {
			t.Errorf("Servers(%q) accepted: %q", bad, got)
		}
	}
}

func TestRequestsMoveToTheNextServer(t *testing.T) {
	var unavailable, answered atomic.Int32
	down := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		unavailable.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		answered.Add(1)
		body, _ := io.ReadAll(req.Body)
		_, _ = w.Write([]byte(req.Method + " " + req.URL.Path + " " + string(body)))
	}))
	defer up.Close()
	// Both test servers' certificates come from one test CA.
	tr, err := New([]string{closedURL(t), down.URL, up.URL}, up.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}

	resp, err := client.Get("https://ignored.invalid/apis/nodus.dev/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "GET /apis/nodus.dev/v1/pools " || unavailable.Load() != 1 {
		t.Fatalf("a GET past a closed and an unavailable server: %q (503s: %d)", body, unavailable.Load())
	}
	// The server that answered is asked first from now on.
	resp, err = client.Post("https://ignored.invalid/x", "text/plain", strings.NewReader("no key"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if unavailable.Load() != 1 || answered.Load() != 2 {
		t.Errorf("the next request did not go to the server that answered: 503s %d, answers %d", unavailable.Load(), answered.Load())
	}
}

func TestOnlySafeRequestsAreRepeated(t *testing.T) {
	var reached atomic.Int32
	// A server that takes the request and drops the connection: it may
	// have acted on it.
	dropper := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reached.Add(1)
		_, _ = io.ReadAll(req.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer dropper.Close()
	var repeated atomic.Int32
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		repeated.Add(1)
		body, _ := io.ReadAll(req.Body)
		_, _ = w.Write([]byte(req.Header.Get("Idempotency-Key") + ":" + string(body)))
	}))
	defer other.Close()
	tr, err := New([]string{dropper.URL, other.URL}, dropper.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}

	post := func(key string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://ignored.invalid/release-capacity", strings.NewReader(`{"epoch":3}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		tr.current.Store(0)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	if out, err := post(""); err == nil || repeated.Load() != 0 {
		t.Errorf("a POST without a key that reached a server was sent again: %q %v", out, err)
	}
	if out, err := post("k-1"); err != nil || out != `k-1:{"epoch":3}` || repeated.Load() != 1 {
		t.Errorf("a keyed POST must go to the next server with its key and body: %q %v", out, err)
	}
	if reached.Load() != 2 {
		t.Errorf("the dropping server saw %d requests, want 2", reached.Load())
	}
}
