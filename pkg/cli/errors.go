package cli

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// Exit codes, one per class of failure.
const (
	ExitOK       = 0
	ExitOther    = 1
	ExitUsage    = 2
	ExitNotFound = 3
	ExitConflict = 4
	ExitAuth     = 5
	ExitServer   = 6
)

type usage struct{ error }

func usageError(err error) error { return usage{err} }

// envelope is the server's error body: a Status plus docs, fix and requestId.
type envelope struct {
	Message   string `json:"message"`
	Reason    string `json:"reason"`
	Code      int    `json:"code"`
	Docs      string `json:"docs"`
	Fix       string `json:"fix"`
	RequestID string `json:"requestId"`
}

// Report prints err for a person (or, with -o json, the server's Status body
// as is) and returns the exit code of its class.
func Report(err error, output string, w io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var u usage
	if errors.As(err, &u) {
		fmt.Fprintf(w, "error: %s\n", terminalSafe(u.error.Error()))
		return ExitUsage
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		r, ok := refusalOf(err)
		if !ok {
			fmt.Fprintf(w, "error: %s\n", terminalSafe(err.Error()))
			return ExitOther
		}
		reportRefusal(r, err.Error(), output, w)
		return r.reason.Exit
	}
	s := status.Status()
	var env envelope
	raw := lastErrorBody.get()
	if json.Unmarshal(raw, &env) != nil || env.Code != int(s.Code) || (env.Reason != "" && s.Reason != "" && env.Reason != string(s.Reason)) {
		// Not the body of this error: its fix, docs and request would be
		// another answer's.
		env, raw = envelope{}, nil
	}
	if output == "json" && len(raw) > 0 {
		fmt.Fprintln(w, jsonTerminalSafe(string(raw)))
	} else {
		// err, not only the server's message: the CLI may have said more
		// around it (what it did, which name to look up). One line each: a
		// line break in the server's text must not forge a line of ours.
		fmt.Fprintf(w, "error: %s\n", oneLine(err.Error()))
		if env.Fix != "" {
			fmt.Fprintf(w, "  fix:     %s\n", oneLine(env.Fix))
		}
		if env.Docs != "" {
			fmt.Fprintf(w, "  docs:    %s\n", oneLine(env.Docs))
		}
		if env.RequestID != "" {
			fmt.Fprintf(w, "  request: %s\n", oneLine(env.RequestID))
		}
	}
	switch code := int(s.Code); {
	case code == 401 || code == 403:
		return ExitAuth
	case code == 404:
		return ExitNotFound
	case code == 409 || code == 412:
		return ExitConflict
	case code == http.StatusTooManyRequests:
		return ExitServer // busy: the request was fine, try it later
	case code >= 500:
		return ExitServer
	case code >= 400:
		return ExitUsage
	}
	return ExitOther
}

// reportRefusal prints a failure of nodus' own as Report prints the
// server's: the error (message: all the CLI said around it), its fix and
// its page; with -o json as a Status.
func reportRefusal(r *refusal, message, output string, w io.Writer) {
	docs := "nodus errors " + r.reason.Name
	if output == "json" {
		body, _ := json.Marshal(struct {
			Kind       string `json:"kind"`
			APIVersion string `json:"apiVersion"`
			Status     string `json:"status"`
			Message    string `json:"message"`
			Reason     string `json:"reason"`
			Fix        string `json:"fix"`
			Docs       string `json:"docs"`
		}{"Status", "v1", "Failure", message, r.reason.Name, r.Fix(), docs})
		fmt.Fprintln(w, jsonTerminalSafe(string(body)))
		return
	}
	// One line each: a certificate's names (a man in the middle's own
	// certificate's) or a server's text may hold line breaks that would
	// forge a fix.
	fmt.Fprintf(w, "error: %s\n", oneLine(message))
	fmt.Fprintf(w, "  fix:     %s\n", oneLine(r.Fix()))
	fmt.Fprintf(w, "  docs:    %s\n", docs)
}

// untrusted says whether err is that the server's certificate is not one
// the configuration trusts.
func untrusted(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	return errors.As(err, &unknownAuthority) || errors.As(err, &invalid) || errors.As(err, &hostname)
}

// lastErrorBody keeps the body of the latest error response: client-go
// decodes it into a metav1.Status and drops the envelope's docs, fix and
// requestId, which a person needs.
var lastErrorBody = &bodyKeeper{}

type bodyKeeper struct {
	mu   sync.Mutex
	body []byte
}

func (k *bodyKeeper) set(b []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.body = b
}

func (k *bodyKeeper) get() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.body
}

// keepErrorBodies wraps a transport to record error bodies.
type keepErrorBodies struct{ next http.RoundTripper }

func (t keepErrorBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		// A later answer's error (a Status of failure in a 200, a watch's
		// error event) is not the earlier answer's: its fix would be read
		// as this one's.
		lastErrorBody.set(nil)
		return resp, err
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if readErr != nil {
		return nil, readErr
	}
	lastErrorBody.set(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// terminalSafe is text from the server (or an agent, through it) as nodus
// prints it: the control characters a terminal would act on shown escaped,
// as \x1b, Unicode's direction controls as \u202e, and invalid UTF-8
// replaced. Newlines and tabs stay.
func terminalSafe(s string) string { return terminalsafe.Escape(s, `\x%02x`) }

// jsonTerminalSafe is terminalSafe for JSON nodus prints: a control
// character can stand only inside a string there, where \u00XX means it.
func jsonTerminalSafe(s string) string { return terminalsafe.Escape(s, `\u%04x`) }

// printableAs renders the JSON of an object as output (json or yaml) asks,
// every string in it terminalSafe: an object with control characters in
// it prints (YAML takes none), and none reaches the terminal.
func printableAs(output string, data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree interface{}
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	data, err := json.Marshal(safeStrings(tree))
	if err != nil || output != "yaml" {
		return data, err
	}
	return yaml.JSONToYAML(data)
}

// safeStrings is a decoded JSON value with its strings, keys too, made
// terminalSafe.
func safeStrings(v interface{}) interface{} {
	switch v := v.(type) {
	case string:
		return terminalSafe(v)
	case []interface{}:
		for i := range v {
			v[i] = safeStrings(v[i])
		}
		return v
	case map[string]interface{}:
		out := make(map[string]interface{}, len(v))
		for k, x := range v {
			out[terminalSafe(k)] = safeStrings(x)
		}
		return out
	}
	return v
}
