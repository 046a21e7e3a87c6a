package accesstoken

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/secret"
)

// REST creates AccessTokens with a fresh secret.
type REST struct {
	*base.REST
}

// Storage returns the AccessToken storage map entries.
func Storage(stores base.Stores) map[string]rest.Storage {
	return map[string]rest.Storage{"accesstokens": &REST{&base.REST{Store: stores.Main}}}
}

// Create generates the token's secret, stores its hash and returns the token
// once, in this response only.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	plain, err := secret.New()
	if err != nil {
		return nil, err
	}
	ctx = secret.WithHash(ctx, secret.Hash(plain))
	out, err := r.Store.Create(ctx, obj, createValidation, options)
	if err != nil {
		return nil, err
	}
	if len(options.DryRun) > 0 {
		return out, nil
	}
	t := out.(*nodusv1.AccessToken).DeepCopy()
	t.Status.Token = t.Name + "." + plain
	return t, nil
}

// Update makes the token through Create when a server-side apply names
// one that does not exist: made by the store's update, it got no secret,
// stored a token that could never authenticate and answered 201 without one.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.UpdateCreatingBy(ctx, r.Create, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// SplitToken splits a bearer token into the AccessToken's name and its secret.
func SplitToken(token string) (name, secret string, ok bool) {
	name, secret, ok = strings.Cut(token, ".")
	return name, secret, ok && name != "" && secret != ""
}
