// Package projecthistory keeps a project's members from reading the
// project's namespace as it was before the project was made. A project
// deleted and made again under the same name, for another customer, has
// the same namespace; a list at an older revision (resourceVersionMatch
// Exact, a limit with a resourceVersion, a continue token: etcd serves
// them from its history) would show the earlier project's objects, its
// hosts, executions and their environments, and so would a watch from one
// (the watch cache replays what changed since).
//
// Such a list is refused with 410 Expired, on which clients list again at
// the current revision. Such a watch is served without the events from
// before the project (Floor, applied by the namespaced stores' Watch): a
// client-go informer lists at "0", which a quiet resource's watch cache may
// answer at a revision older than a new project, and then watches from it;
// refused, it would list and watch again at the same revision until the
// cache moved.
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

type floorKey struct{}

// Floor is the first revision a watch in ctx may show, when it has one.
func Floor(ctx context.Context) (int64, bool) {
	floor, ok := ctx.Value(floorKey{}).(int64)
	return floor, ok
}

// Filter refuses a list in a project's namespace that reads a revision from
// before the project was made, and gives a watch from one its Floor, unless
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
		switch {
		case made <= read:
		case info.Verb == "watch":
			req = req.WithContext(context.WithValue(req.Context(), floorKey{}, made))
		default:
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
		switch q.Get("resourceVersionMatch") {
		case string(metav1.ResourceVersionMatchExact):
			return rv
		case "":
			// A limit with a resourceVersion and no match reads exactly
			// that revision, as lists did before resourceVersionMatch.
			if limit, _ := strconv.ParseInt(q.Get("limit"), 10, 64); limit > 0 {
				return rv
			}
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
