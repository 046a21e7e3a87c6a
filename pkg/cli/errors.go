package cli

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		fmt.Fprintf(w, "error: %v\n", u.error)
		return ExitUsage
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		fmt.Fprintf(w, "error: %v\n", err)
		if fix := unreached(err); fix != "" {
			fmt.Fprintf(w, "  fix:     %s\n", fix)
			return ExitServer
		}
		return ExitOther
	}
	s := status.Status()
	var env envelope
	raw := lastErrorBody.get()
	_ = json.Unmarshal(raw, &env)
	if output == "json" && len(raw) > 0 {
		fmt.Fprintln(w, string(raw))
	} else {
		// err, not only the server's message: the CLI may have said more
		// around it (what it did, which name to look up).
		fmt.Fprintf(w, "error: %v\n", err)
		if env.Fix != "" {
			fmt.Fprintf(w, "  fix:     %s\n", env.Fix)
		}
		if env.Docs != "" {
			fmt.Fprintf(w, "  docs:    %s\n", env.Docs)
		}
		if env.RequestID != "" {
			fmt.Fprintf(w, "  request: %s\n", env.RequestID)
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

// unreached is the next step when err is that the server was not reached,
// or not trusted: nothing the server said, so no fix of its own.
func unreached(err error) string {
	var unknownAuthority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &unknownAuthority) || errors.As(err, &invalid) || errors.As(err, &hostname):
		return "The server's certificate is not one this configuration trusts: log in again with its CA, `nodus login --server URL --token TOKEN --ca-file ca.crt` (the server serves it at /ca.crt; compare its fingerprint with your operator's)."
	case errors.As(err, &dns) || errors.As(err, &op):
		return "The server did not answer: check that nodus-server runs and that this configuration points at it (`nodus config get-contexts` shows where)."
	}
	return ""
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
