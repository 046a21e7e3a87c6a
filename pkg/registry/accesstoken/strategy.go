// Package accesstoken is the registry of AccessTokens: bearer credentials
// whose secret the server generates, returns once and stores only hashed.
package accesstoken

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/secret"
)

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList {
		return validation.ValidateAccessToken(obj.(*nodusv1.AccessToken))
	},
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		return validation.ValidateAccessTokenUpdate(obj.(*nodusv1.AccessToken), old.(*nodusv1.AccessToken))
	},
	// Only the hash of the secret that REST.Create generated is stored; a
	// client can never choose its own hash or smuggle a token into storage.
	PrepareForCreate: func(ctx context.Context, obj runtime.Object) {
		obj.(*nodusv1.AccessToken).Status = nodusv1.AccessTokenStatus{TokenHash: secret.HashFrom(ctx)}
	},
	CopyStatus:  func(obj, old runtime.Object) { obj.(*nodusv1.AccessToken).Status = old.(*nodusv1.AccessToken).Status },
	ResetFields: []string{"status"},
}

func selectable(obj runtime.Object) fields.Set {
	return fields.Set{"spec.user": obj.(*nodusv1.AccessToken).Spec.User}
}

var table = base.Table{Columns: []base.Column{
	base.Col("User", "string", "Who the token authenticates as.", func(t *nodusv1.AccessToken) interface{} { return t.Spec.User }),
	base.Col("Expires", "string", "Time until the token expires.", func(t *nodusv1.AccessToken) interface{} {
		if t.Spec.ExpiresAt == nil {
			return "never"
		}
		return base.Until(*t.Spec.ExpiresAt)
	}),
	base.Col("Description", "string", "What the token is for.", func(t *nodusv1.AccessToken) interface{} { return base.Str(t.Spec.Description) }),
}}
