// Package requestnamespace refuses requests whose namespace can be no
// project's name. The library checks an object's name before it becomes a
// storage key, not its namespace: a path naming the namespace ".." (sent as
// %2E%2E) reached the store, whose key check answered 500 InternalError.
package requestnamespace

import (
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// Filter answers 400 BadRequest for a resource request in a namespace that
// is not a valid namespace (project) name. It runs after authorization, so
// that a caller who is no operator learns nothing from it: the authorizer
// refuses such a caller every namespace that is not a project of theirs.
func Filter(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if ok && info.IsResourceRequest && info.Namespace != "" {
			if problems := apimachineryvalidation.ValidateNamespaceName(info.Namespace, false); len(problems) > 0 {
				apierror.Write(w, apierrors.NewBadRequest(fmt.Sprintf("%q is not a valid namespace (project) name: %s",
					info.Namespace, strings.Join(problems, "; "))))
				return
			}
		}
		handler.ServeHTTP(w, req)
	})
}
