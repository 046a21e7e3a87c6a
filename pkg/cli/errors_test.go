package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodus-dev/nodus/docs"
	"github.com/nodus-dev/nodus/pkg/apierror"
)

// TestAnErrorIsShownWithItsOwnAnswersFix: the fix, docs and request ID
// printed with an error are its answer's. An error that came with no error
// answer (a Status of failure in a 200 after a retried 503, a watch's
// error event) was shown with the earlier answer's.
func TestAnErrorIsShownWithItsOwnAnswersFix(t *testing.T) {
	answers := []struct {
		code int
		body string
	}{
		{http.StatusServiceUnavailable, `{"kind":"Status","status":"Failure","message":"starting","reason":"ServiceUnavailable","code":503,"fix":"F1: retry","requestId":"R1"}`},
		{http.StatusOK, `{"kind":"Status","status":"Failure","message":"M2","reason":"Conflict","code":409}`},
	}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a := answers[n%len(answers)]
		n++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		_, _ = io.WriteString(w, a.body)
	}))
	defer srv.Close()
	client := &http.Client{Transport: keepErrorBodies{next: http.DefaultTransport}}
	for range answers {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var out strings.Builder
	Report(&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Message: "M2", Reason: metav1.StatusReasonConflict, Code: 409}}, "", &out)
	if strings.Contains(out.String(), "F1") || strings.Contains(out.String(), "R1") {
		t.Errorf("the error of a 200 is shown with the 503's fix:\n%s", out.String())
	}

	// An error answer's own fix is shown; not for an error of another code.
	lastErrorBody.set([]byte(answers[0].body))
	out.Reset()
	Report(apierrors.NewServiceUnavailable("starting"), "", &out)
	if !strings.Contains(out.String(), "fix:     F1: retry") || !strings.Contains(out.String(), "request: R1") {
		t.Errorf("a 503 is shown without its own fix:\n%s", out.String())
	}
	out.Reset()
	Report(apierrors.NewInternalError(io.EOF), "json", &out)
	if strings.Contains(out.String(), "F1") {
		t.Errorf("a 500 is shown with a 503's body:\n%s", out.String())
	}
}

// TestAnAnswerPastTheBoundIsRefused: the CLI reads answers whole; a server
// that sends an endless one (hostile, or at fault) must not take the
// laptop's memory. A watch is a stream, bounded event by event
// (TestAWatchEventPastTheBoundIsRefused), not as a whole.
func TestAnAnswerPastTheBoundIsRefused(t *testing.T) {
	defer func(was int64) { maxAnswerBytes = was }(maxAnswerBytes)
	maxAnswerBytes = 1 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		size := 1 << 10
		if req.URL.Query().Get("size") == "over" {
			size++
		}
		_, _ = io.WriteString(w, strings.Repeat("x", size))
	}))
	defer srv.Close()
	client := &http.Client{Transport: boundedAnswers{next: http.DefaultTransport}}
	read := func(query string) (int, error) {
		resp, err := client.Get(srv.URL + "/?" + query)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return len(body), err
	}
	if n, err := read("size=at"); err != nil || n != 1<<10 {
		t.Errorf("an answer of the bound: %d bytes, %v", n, err)
	}
	if _, err := read("size=over"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an answer past the bound: %v", err)
	}
	if n, err := read("size=over&watch=true"); err != nil || n != 1<<10+1 {
		t.Errorf("a watch past the bound: %d bytes, %v", n, err)
	}
}

// TestARefusedAnswerIsNotRetried: release, lend and executions run retry
// what may succeed when sent again. Every error that was not an API status
// counted, a server nodus does not trust and an answer it refused
// included: a release against a wrong CA was sent five times over ten
// seconds before its fix showed.
func TestARefusedAnswerIsNotRetried(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"an unknown authority": {&url.Error{Op: "Post", URL: "https://x", Err: x509.UnknownAuthorityError{}}, false},
		"another host's name":  {&url.Error{Op: "Post", URL: "https://x", Err: x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}}, false},
		"a redirect":           {refuseRedirectError(t), false},
		"an answer too large":  {fmt.Errorf("decoding: %w", tooLarge(t)), false},
		"cancelled":            {&url.Error{Op: "Post", URL: "https://x", Err: context.Canceled}, false},
		"a refused connection": {&url.Error{Op: "Post", URL: "https://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, true},
		"503":                  {apierrors.NewServiceUnavailable("busy"), true},
		"429":                  {apierrors.NewTooManyRequests("slow down", 1), true},
		"409":                  {apierrors.NewConflict(schema.GroupResource{Resource: "reservedhosts"}, "h", errors.New("epoch")), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s (%v): transient %v, want %v", name, tc.err, got, tc.want)
		}
	}
}

// tooLarge is what the CLI's transport says of an answer past its bound.
func tooLarge(t *testing.T) error {
	t.Helper()
	defer func(was int64) { maxAnswerBytes = was }(maxAnswerBytes)
	maxAnswerBytes = 1
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "xx") }))
	defer server.Close()
	resp, err := (&http.Client{Transport: boundedAnswers{next: http.DefaultTransport}}).Get(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err = io.ReadAll(resp.Body); err == nil {
		t.Fatal("an answer past the bound was read")
	}
	return err
}

// refuseRedirectError is what the CLI's transport says of a redirect.
func refuseRedirectError(t *testing.T) error {
	t.Helper()
	server := httptest.NewServer(http.RedirectHandler("https://elsewhere.example/", http.StatusFound))
	defer server.Close()
	req, _ := http.NewRequest("GET", server.URL, nil)
	_, err := refuseRedirects{http.DefaultTransport}.RoundTrip(req)
	if err == nil {
		t.Fatal("a redirect was taken")
	}
	return err
}

// TestAFailureOfNodusOwnIsShownWithItsFixAndPage: nodus' own refusals (a
// redirect, an answer too large, an answer it does not trust) printed the
// error alone and exited 1, as a local failure: no fix, no page. Each has
// a reason now, shown with its fix and the command that prints its page,
// and exits as the server's failure it is; -o json prints it as a Status.
func TestAFailureOfNodusOwnIsShownWithItsFixAndPage(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason *cliReason
	}{
		{refuseRedirectError(t), reasonRedirectRefused},
		{fmt.Errorf("decoding: %w", tooLarge(t)), reasonAnswerTooLarge},
		{refuse(reasonAnswerRefused, errors.New("refusing acme/gpu-1: the server answered for acme/gpu-2")), reasonAnswerRefused},
		{&url.Error{Op: "Get", URL: "https://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, reasonServerUnreachable},
		{&url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, reasonServerNotTrusted},
	} {
		var out strings.Builder
		if code := Report(tc.err, "", &out); code != tc.reason.Exit || code == ExitOther {
			t.Errorf("%s: exit %d, want %d", tc.reason.Name, code, tc.reason.Exit)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 3 || lines[0] != "error: "+oneLine(tc.err.Error()) || lines[1] != "  fix:     "+tc.reason.Fix ||
			lines[2] != "  docs:    nodus errors "+tc.reason.Name {
			t.Errorf("%s is shown as:\n%s", tc.reason.Name, out.String())
		}
		out.Reset()
		Report(tc.err, "json", &out)
		var status envelope
		if err := json.Unmarshal([]byte(out.String()), &status); err != nil || status.Reason != tc.reason.Name ||
			status.Fix != tc.reason.Fix || status.Docs != "nodus errors "+tc.reason.Name || status.Message != tc.err.Error() {
			t.Errorf("%s with -o json: %v\n%s", tc.reason.Name, err, out.String())
		}
	}
	// A failure's own fix, where it knows better than its reason.
	var out strings.Builder
	Report(refuseWithFix(reasonNotDrained, errors.New("not drained"), "Wait for acme/gpu-1."), "", &out)
	if !strings.Contains(out.String(), "  fix:     Wait for acme/gpu-1.\n") {
		t.Errorf("a failure's own fix is not shown:\n%s", out.String())
	}
	// A failure that is none of nodus' reasons stays a local one.
	out.Reset()
	if code := Report(errors.New("disk full"), "", &out); code != ExitOther || out.String() != "error: disk full\n" {
		t.Errorf("a local failure: exit %d\n%s", code, out.String())
	}
}

// TestEveryReasonOfNodusOwnHasItsPage: each reason of nodus' own has a
// summary, a fix and a page that states its exit code; no name is also a
// server's reason (`nodus errors NAME` would show one for the other); and
// no page is of a reason that is gone.
func TestEveryReasonOfNodusOwnHasItsPage(t *testing.T) {
	names := map[string]bool{}
	for _, r := range cliReasons {
		names[r.Name] = true
		if r.Summary == "" || r.Fix == "" || r.Exit == ExitOK || r.Exit == ExitUsage {
			t.Errorf("%s: summary %q, fix %q, exit %d", r.Name, r.Summary, r.Fix, r.Exit)
		}
		if apierror.IsRegistered(metav1.StatusReason(r.Name)) {
			t.Errorf("%s is the name of a server's reason too", r.Name)
		}
		var out strings.Builder
		cmd, _ := NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
		cmd.SetArgs([]string{"errors", r.Name})
		if err := cmd.Execute(); err != nil || !strings.HasPrefix(out.String(), "# "+r.Name+"\n") ||
			!strings.Contains(out.String(), fmt.Sprintf("nodus exit code %d.", r.Exit)) {
			t.Errorf("nodus errors %s: %v\n%.200s", r.Name, err, out.String())
		}
	}
	pages, err := fs.ReadDir(docs.CLIPages, "cli")
	if err != nil || len(pages) != len(cliReasons) {
		t.Errorf("%d pages of nodus' own reasons, %d reasons: %v", len(pages), len(cliReasons), err)
	}
	for _, page := range pages {
		if !names[strings.TrimSuffix(page.Name(), ".md")] {
			t.Errorf("docs/cli/%s is the page of no reason", page.Name())
		}
	}
	// The server's pages are printed as well, and nothing else is.
	var out strings.Builder
	cmd, _ := NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	cmd.SetArgs([]string{"errors", "NodeReserved"})
	if err := cmd.Execute(); err != nil || !strings.HasPrefix(out.String(), "# NodeReserved\n") {
		t.Errorf("nodus errors NodeReserved: %v\n%.200s", err, out.String())
	}
	cmd.SetArgs([]string{"errors", "../errors/NodeReserved"})
	if err := cmd.Execute(); err == nil || Report(err, "", io.Discard) != ExitUsage {
		t.Errorf("nodus errors of no reason: %v", err)
	}
}
