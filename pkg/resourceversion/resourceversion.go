// Package resourceversion refuses, with 400, a resourceVersion that is no
// etcd revision before it reaches the storage: the watch cache's Get and
// Watch, and the store's Create, Update and Patch, answered such values
// with bare errors, which the API turns into 500s.
package resourceversion

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// Check says why rv is no resourceVersion a read may name: "" (the
// latest) and "0" (any) are, as is any etcd revision.
func Check(rv string) error {
	if rv == "" {
		return nil
	}
	if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
		return fmt.Errorf("resourceVersion %q is not a resource version: use one the server answered (metadata.resourceVersion), or none", rv)
	}
	return nil
}

// Filter refuses a read (get, list, watch) whose resourceVersion parameter
// is no resource version.
func Filter(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if ok && info.IsResourceRequest && (info.Verb == "get" || info.Verb == "list" || info.Verb == "watch") {
			if err := Check(req.URL.Query().Get("resourceVersion")); err != nil {
				apierror.Write(w, apierrors.NewBadRequest(err.Error()))
				return
			}
		}
		handler.ServeHTTP(w, req)
	})
}

// Plugin refuses a written object whose metadata.resourceVersion is no
// resource version, and a POSTed one that names any (the store answered
// it 500).
type Plugin struct {
	*admission.Handler
}

// NewPlugin returns the check for creates and updates (patches included:
// it sees the patched object).
func NewPlugin() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

var _ admission.MutationInterface = &Plugin{}

// Admit runs among the mutating plugins, which the store calls before it
// reads the object's resourceVersion; a validating plugin would run after.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	obj := a.GetObject()
	if obj == nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil // not an object with metadata: an action's request
	}
	rv := m.GetResourceVersion()
	// Only a POST: an apply or update that creates the object may carry
	// the version of a manifest read earlier, which the store drops there.
	if info, ok := request.RequestInfoFrom(ctx); ok && info.Verb == "create" && rv != "" {
		return apierrors.NewBadRequest(fmt.Sprintf("metadata.resourceVersion must not be set on an object to create (it is %q): leave it out", rv))
	}
	if err := Check(rv); err != nil {
		return apierrors.NewBadRequest("metadata." + err.Error())
	}
	return nil
}
