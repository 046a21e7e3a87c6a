// Package applycheck answers a server-side apply whose patch does not fit
// its kind's schema (a duplicate key in a keyed list, a value of the wrong
// type, an undeclared field) with 422 Invalid. The field manager builds the
// typed patch before any validation runs and returns the schema's error as
// a plain error, which the API answers 500; this check asks the same
// schema first, with the same converter the server builds from its OpenAPI.
package applycheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// Schemas holds the type converter once the API groups are installed.
type Schemas struct {
	converter atomic.Pointer[managedfields.TypeConverter]
}

// Set installs the converter.
func (s *Schemas) Set(tc managedfields.TypeConverter) { s.converter.Store(&tc) }

// Filter checks apply patches of up to maxBody bytes to the kinds known
// (those the converter was built for); a longer body, one that does not
// decode, or one of another kind is left to the handler, which answers it.
func Filter(handler http.Handler, schemas *Schemas, known func(schema.GroupVersionKind) bool, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		tc := schemas.converter.Load()
		if !ok || tc == nil || !info.IsResourceRequest || req.Method != http.MethodPatch ||
			!strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch+yaml") {
			handler.ServeHTTP(w, req)
			return
		}
		head, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		req.Body = readCloser{io.MultiReader(bytes.NewReader(head), req.Body), req.Body}
		if err != nil || int64(len(head)) > maxBody {
			handler.ServeHTTP(w, req)
			return
		}
		patch := map[string]interface{}{}
		if yaml.Unmarshal(head, &patch) != nil {
			handler.ServeHTTP(w, req)
			return
		}
		u := &unstructured.Unstructured{Object: patch}
		gvk := u.GroupVersionKind()
		if gvk.Group != info.APIGroup || gvk.Version != info.APIVersion || !known(gvk) {
			handler.ServeHTTP(w, req) // the field manager refuses another version with 400
			return
		}
		if _, err := (*tc).ObjectToTyped(u); err != nil {
			apierror.Write(w, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
				Message: fmt.Sprintf("the apply patch does not fit %s: %s", u.GetKind(), misfit(gvk, err)),
				Details: &metav1.StatusDetails{Group: gvk.Group, Kind: gvk.Kind, Name: u.GetName()},
			}})
			return
		}
		handler.ServeHTTP(w, req)
	})
}

// withoutValues are the kinds whose values a refusal must not repeat: an
// Execution's environment holds a borrower's secrets, and the answer's
// message goes to the audit log.
var withoutValues = map[schema.GroupKind]bool{{Group: "nodus.dev", Kind: "Execution"}: true}

// misfit words the schema's refusal of a patch of kind gvk: the schema's
// own words, or for a kind in withoutValues the paths it refused alone
// (its words repeat the value: "expected string, got …").
func misfit(gvk schema.GroupVersionKind, err error) string {
	if !withoutValues[gvk.GroupKind()] {
		return err.Error()
	}
	var errs typed.ValidationErrors
	if !errors.As(err, &errs) || len(errs) == 0 {
		return "a value does not fit its field (not repeated here: the object holds secrets)"
	}
	paths := make([]string, 0, len(errs))
	for _, e := range errs {
		paths = append(paths, e.Path)
	}
	return fmt.Sprintf("the value at %s does not fit its field's type or schema (not repeated here: the object holds secrets)", strings.Join(paths, ", "))
}

type readCloser struct {
	io.Reader
	io.Closer
}
