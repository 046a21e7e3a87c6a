package ironic

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/nodus-dev/nodus/pkg/envelope"
)

// Prefix is where the Ironic API is served.
const Prefix = "/v1"

// headerRequestID is Ironic's request id header; headerRequestIDNew is the
// name newer OpenStack services use beside it.
const (
	headerRequestID    = "X-OpenStack-Request-Id"
	headerRequestIDNew = "Openstack-Request-Id"
)

// setRequestID sets both request id headers.
func setRequestID(h http.Header, id string) {
	h.Set(headerRequestID, "req-"+id)
	h.Set(headerRequestIDNew, "req-"+id)
}

// IsIronicPath says whether a request is for the Ironic API.
func IsIronicPath(path string) bool { return path == Prefix || strings.HasPrefix(path, Prefix+"/") }

// WriteError writes an error in Ironic's body format: error_message holds a
// JSON document with faultcode, faultstring and debuginfo (null, as Ironic
// sends it). Nodus' registered reason, docs page, fix and request id stand
// beside error_message at the top level, where Ironic's clients ignore
// them. The envelope uses it for every error under /v1, whichever layer
// raised it.
func WriteError(w http.ResponseWriter, code int, s envelope.Status) {
	fault := "Client"
	if code >= 500 {
		fault = "Server"
	}
	inner, _ := json.Marshal(map[string]interface{}{"faultcode": fault, "faultstring": s.Message, "debuginfo": nil})
	body, _ := json.Marshal(map[string]string{
		"error_message": string(inner),
		"reason":        string(s.Reason), "docs": s.Docs, "fix": s.Fix, "requestId": s.RequestID,
	})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	setRequestID(h, s.RequestID)
	setVersionHeaders(h, nil)
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// WithAuthToken lets Ironic clients authenticate as OpenStack's do, with
// X-Auth-Token: it is the same bearer token as the Kubernetes API's.
func WithAuthToken(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if token := req.Header.Get("X-Auth-Token"); token != "" && req.Header.Get("Authorization") == "" && IsIronicPath(req.URL.Path) {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		handler.ServeHTTP(w, req)
	})
}
