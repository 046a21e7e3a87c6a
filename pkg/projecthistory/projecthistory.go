// Package projecthistory keeps a project's members from reading the
// project's namespace as it was before the project was made. A project
// deleted and made again under the same name, for another customer, has
// the same namespace; a list at an older revision (resourceVersionMatch
// Exact, or a continue token, which etcd serves from its history) or a
// watch from one (which the watch cache replays) would show the earlier
// project's objects: its hosts, executions and their environments.
package projecthistory

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// Births tells the etcd revision at which a project was made, 0 when
// there is no such project.
type Births interface {
	ProjectMadeAt(ctx context.Context, project string) (int64, error)
}

// Filter refuses, with 410 Expired, a list or watch in a project's
// namespace that reads a revision from before the project was made, unless
// the caller is trusted with every project (trusted).
func Filter(handler http.Handler, births Births, trusted func(user.Info) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		u, hasUser := request.UserFrom(req.Context())
		if !ok || !hasUser || !info.IsResourceRequest || info.Namespace == "" || trusted(u) {
			handler.ServeHTTP(w, req)
			return
		}
		read := revisionRead(info.Verb, req)
		if read <= 0 {
			handler.ServeHTTP(w, req)
			return
		}
		made, err := births.ProjectMadeAt(req.Context(), info.Namespace)
		if err != nil {
			apierror.Write(w, apierrors.NewServiceUnavailable("reading when project "+info.Namespace+" was made: "+err.Error()))
			return
		}
		if made > read {
			apierror.Write(w, apierrors.NewResourceExpired(fmt.Sprintf(
				"resourceVersion %d is older than project %q: list again without a resourceVersion or continue token", read, info.Namespace)))
			return
		}
		handler.ServeHTTP(w, req)
	})
}

// revisionRead is the past revision a request reads from etcd's or the
// watch cache's history, 0 for one that reads the current state (no
// resourceVersion, "0", or one served as "not older than"). What does not
// parse is left to the handler, which refuses it.
func revisionRead(verb string, req *http.Request) int64 {
	q := req.URL.Query()
	rv, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	switch verb {
	case "watch":
		return rv
	case "list":
		if token := q.Get("continue"); token != "" {
			return continuedAt(token)
		}
		if q.Get("resourceVersionMatch") == string(metav1.ResourceVersionMatchExact) {
			return rv
		}
	}
	return 0
}

// continuedAt is the revision a continue token lists at (the library's
// format: base64 of {"v":"meta.k8s.io/v1","rv":N,"start":KEY}).
func continuedAt(token string) int64 {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0
	}
	var c struct {
		RV int64 `json:"rv"`
	}
	if json.Unmarshal(data, &c) != nil {
		return 0
	}
	return c.RV
}
