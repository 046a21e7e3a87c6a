package server

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// maxRequestURI bounds a request's URI. The audit log keeps every request's
// URI, unauthenticated ones included (a failed authentication is audited
// too), and an HTTP header may carry a megabyte: without a bound, anyone
// who reaches the port wrote a megabyte of log, on etcd's disk, per
// request. Names are at most 253 bytes, and a selector of hundreds of
// values fits.
const maxRequestURI = 16 << 10

// withRequestURILimit refuses a request whose URI is past maxRequestURI
// before anything else reads it.
func withRequestURILimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if n := len(req.RequestURI); n > maxRequestURI {
			apierror.Write(w, apierror.New(req.Context(), apierror.ReasonRequestURITooLong, schema.GroupResource{}, "",
				fmt.Sprintf("the request's URI has %d bytes; the server takes at most %d", n, maxRequestURI), ""))
			return
		}
		next.ServeHTTP(w, req)
	})
}
