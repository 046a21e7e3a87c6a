package server

import (
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// The audit log keeps every request's URI and the addresses its proxies
// name (X-Forwarded-For, X-Real-Ip), unauthenticated requests' included (a
// failed authentication is audited too), and an HTTP header may carry a
// megabyte: without bounds, anyone who reaches the port wrote a megabyte or
// more of log, on etcd's disk, per request. Names are at most 253 bytes, a
// selector of hundreds of values fits, and a proxy adds one address per hop.
const (
	maxRequestURI       = 16 << 10
	maxForwardedHeaders = 1 << 10
)

// forwardedHeaders name the client's address as proxies saw it.
var forwardedHeaders = []string{"X-Forwarded-For", "X-Real-Ip"}

// withRequestBounds refuses a request whose URI or forwarded addresses are
// past their bounds before anything else reads them.
func withRequestBounds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if n := len(req.RequestURI); n > maxRequestURI {
			apierror.Write(w, apierror.New(req.Context(), apierror.ReasonRequestURITooLong, schema.GroupResource{}, "",
				fmt.Sprintf("the request's URI has %d bytes; the server takes at most %d", n, maxRequestURI), ""))
			return
		}
		forwarded := 0
		for _, h := range forwardedHeaders {
			for _, v := range req.Header.Values(h) {
				forwarded += len(v)
			}
		}
		if forwarded > maxForwardedHeaders {
			apierror.Write(w, apierror.New(req.Context(), metav1.StatusReasonBadRequest, schema.GroupResource{}, "",
				fmt.Sprintf("the X-Forwarded-For and X-Real-Ip headers hold %d bytes; the server takes at most %d", forwarded, maxForwardedHeaders),
				"Send at most 1 KiB of X-Forwarded-For and X-Real-Ip: a proxy adds one address per hop."))
			return
		}
		next.ServeHTTP(w, req)
	})
}
