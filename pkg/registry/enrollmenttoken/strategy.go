// Package enrollmenttoken is the registry of EnrollmentTokens: single-use,
// expiring credentials with which a server's nodusd enrolls into a pool.
package enrollmenttoken

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/secret"
)

// DefaultLifetime is how long a token works when its spec says nothing.
const DefaultLifetime = 24 * time.Hour

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateEnrollmentToken(obj.(*nodusv1.EnrollmentToken))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateEnrollmentTokenUpdate(obj.(*nodusv1.EnrollmentToken), old.(*nodusv1.EnrollmentToken))
	},
	ValidateStatus: func(obj, old runtime.Object) field.ErrorList {
		before, _ := old.(*nodusv1.EnrollmentToken)
		return validation.ValidateEnrollmentTokenStatus(obj.(*nodusv1.EnrollmentToken), before)
	},
	PrepareForCreate: func(ctx context.Context, obj runtime.Object) {
		t := obj.(*nodusv1.EnrollmentToken)
		t.Status = nodusv1.EnrollmentTokenStatus{TokenHash: secret.HashFrom(ctx)}
		if t.Spec.ExpiresAt == nil {
			t.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(DefaultLifetime).Truncate(time.Second)}
		}
	},
	// An update without an expiry keeps the one the token has: a token
	// always expires (nil would be never), and a manifest replaced or
	// edited without expiresAt would otherwise make it valid for ever.
	PrepareForUpdate: func(obj, old runtime.Object) {
		if t := obj.(*nodusv1.EnrollmentToken); t.Spec.ExpiresAt == nil {
			t.Spec.ExpiresAt = old.(*nodusv1.EnrollmentToken).Spec.ExpiresAt
		}
	},
	CopyStatus: func(obj, old runtime.Object) {
		obj.(*nodusv1.EnrollmentToken).Status = old.(*nodusv1.EnrollmentToken).Status
	},
	CopySpec: func(obj, old runtime.Object) {
		obj.(*nodusv1.EnrollmentToken).Spec = old.(*nodusv1.EnrollmentToken).Spec
	},
	ResetFields:       []string{"status"},
	StatusResetFields: []string{"spec"},
}

var table = base.Table{Columns: []base.Column{
	base.Col("Pool", "string", "Pool the node joins.", func(t *nodusv1.EnrollmentToken) interface{} { return t.Spec.Pool }),
	base.Col("Class", "string", "Resource class of the node.", func(t *nodusv1.EnrollmentToken) interface{} { return t.Spec.ResourceClass }),
	base.Col("Used By", "string", "Node that enrolled with it.", func(t *nodusv1.EnrollmentToken) interface{} { return base.Str(t.Status.UsedBy) }),
	base.Col("Expires", "string", "Time until it expires.", func(t *nodusv1.EnrollmentToken) interface{} {
		if t.Spec.ExpiresAt == nil {
			return "-"
		}
		return base.Until(*t.Spec.ExpiresAt)
	}),
}}
