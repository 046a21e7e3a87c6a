package outcome

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestRefused(t *testing.T) {
	executions := schema.GroupResource{Group: "nodus.dev", Resource: "executions"}
	for name, tc := range map[string]struct {
		err     error
		refused bool
	}{
		"conflict":          {apierrors.NewConflict(executions, "e", errors.New("changed")), true},
		"already exists":    {apierrors.NewAlreadyExists(executions, "e"), true},
		"not found":         {apierrors.NewNotFound(executions, "e"), true},
		"invalid":           {apierrors.NewInvalid(schema.GroupKind{Group: "nodus.dev", Kind: "Execution"}, "e", field.ErrorList{field.Required(field.NewPath("spec"), "")}), true},
		"forbidden":         {apierrors.NewForbidden(executions, "e", errors.New("no")), true},
		"too many requests": {apierrors.NewTooManyRequests("slow down", 1), true},
		"wrapped conflict":  {fmt.Errorf("writing: %w", apierrors.NewConflict(executions, "e", errors.New("changed"))), true},

		"request timeout (408)":           {apierrors.NewTimeoutError("timed out", 1), false},
		"internal error (etcd timed out)": {apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false},
		"server timeout (500)":            {apierrors.NewServerTimeout(executions, "update", 1), false},
		"service unavailable":             {apierrors.NewServiceUnavailable("leader changed"), false},
		"gateway timeout (504)":           {apierrors.NewGenericServerResponse(504, "PUT", executions, "e", "", 0, true), false},
		"connection lost":                 {&url.Error{Op: "Put", URL: "https://nodus/apis", Err: io.ErrUnexpectedEOF}, false},
		"deadline":                        {context.DeadlineExceeded, false},
		"cancelled":                       {context.Canceled, false},
	} {
		if got := Refused(tc.err); got != tc.refused {
			t.Errorf("%s: Refused = %v, want %v", name, got, tc.refused)
		}
	}
}

func TestFinal(t *testing.T) {
	executions := schema.GroupResource{Group: "nodus.dev", Resource: "executions"}
	for name, tc := range map[string]struct {
		err   error
		final bool
	}{
		"conflict":         {apierrors.NewConflict(executions, "e", errors.New("changed")), true},
		"not found":        {apierrors.NewNotFound(executions, "e"), true},
		"forbidden":        {apierrors.NewForbidden(executions, "e", errors.New("no")), true},
		"unauthorized":     {apierrors.NewUnauthorized("expired"), true},
		"unprocessable":    {apierrors.NewGenericServerResponse(422, "POST", executions, "e", "", 0, true), true},
		"wrapped conflict": {fmt.Errorf("writing: %w", apierrors.NewConflict(executions, "e", errors.New("changed"))), true},

		"too many requests":     {apierrors.NewTooManyRequests("slow down", 1), false},
		"request timeout (408)": {apierrors.NewGenericServerResponse(408, "POST", executions, "e", "", 0, true), false},
		"internal error":        {apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false},
		"service unavailable":   {apierrors.NewServiceUnavailable("leader changed"), false},
		"connection lost":       {&url.Error{Op: "Post", URL: "https://nodus/apis", Err: io.ErrUnexpectedEOF}, false},
		"deadline":              {context.DeadlineExceeded, false},
	} {
		if got := Final(tc.err); got != tc.final {
			t.Errorf("%s: Final = %v, want %v", name, got, tc.final)
		}
	}
}
