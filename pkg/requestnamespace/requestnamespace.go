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
	"k8s.io/apimachinery/pkg/api/validation/path"
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
			validate := func(name string) []string { return apimachineryvalidation.ValidateNamespaceName(name, false) }
			if info.APIGroup == "" && info.Resource == "namespaces" && info.Subresource == "" {
				// A read of a namespace by a name no project can have is
				// of one that is not there: 404, as kube-apiserver
				// answers. Only a name that cannot be a key is refused.
				validate = path.IsValidPathSegmentName
			}
			if problems := validate(info.Namespace); len(problems) > 0 {
				apierror.Write(w, apierrors.NewBadRequest(fmt.Sprintf("%q is not a valid namespace (project) name: %s",
					info.Namespace, strings.Join(problems, "; "))))
				return
			}
		}
		handler.ServeHTTP(w, req)
	})
}
