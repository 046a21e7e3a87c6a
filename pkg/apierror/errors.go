package apierror

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodus-dev/nodus/pkg/exchange"
)

// New builds a StatusError with a registered reason and records fix for the
// request in ctx (when fix is not empty).
func New(ctx context.Context, reason metav1.StatusReason, qualified schema.GroupResource, name, message, fix string) *apierrors.StatusError {
	// An unregistered reason is a programming error that the registry test
	// catches; at run time it degrades to an internal error, never a panic.
	r := Lookup(reason, http.StatusInternalServerError)
	if fix != "" {
		exchange.From(ctx).SetFix(fix)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(r.Code),
		Reason:  r.Name,
		Message: message,
		Details: &metav1.StatusDetails{Group: qualified.Group, Kind: qualified.Resource, Name: name},
	}}
}

// ProjectNotFound says that namespace is no Project.
func ProjectNotFound(ctx context.Context, namespace string) *apierrors.StatusError {
	return New(ctx, ReasonProjectNotFound, schema.GroupResource{Group: "nodus.dev", Resource: "projects"}, namespace,
		fmt.Sprintf("namespace %q is not a project: there is no Project named %q", namespace, namespace), "")
}

// Write answers err as a JSON Status from a filter outside the generic
// handlers, which have no serializer there; the envelope around the handler
// chain completes it (docs link, fix) as it does every Status.
func Write(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
