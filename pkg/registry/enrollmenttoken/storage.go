package enrollmenttoken

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/secret"
)

// TokenPrefix starts every enrollment token; it holds a character no
// AccessToken name can have, so the two kinds never mix.
const TokenPrefix = "enroll_"

// Kind describes the EnrollmentToken storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("enrollmenttokens"), Singular: nodusv1.Resource("enrollmenttoken"),
		New:     func() runtime.Object { return &nodusv1.EnrollmentToken{} },
		NewList: func() runtime.Object { return &nodusv1.EnrollmentTokenList{} },
		Rules:   rules, Table: table,
	}
}

// REST creates EnrollmentTokens with a fresh secret, returned once with the
// fingerprint of the CA that the agent should pin.
type REST struct {
	*base.REST
	CAFingerprint string
}

// Storage returns the EnrollmentToken storages.
func Storage(stores base.Stores, caFingerprint string) map[string]rest.Storage {
	return map[string]rest.Storage{
		"enrollmenttokens":        &REST{REST: &base.REST{Store: stores.Main}, CAFingerprint: caFingerprint},
		"enrollmenttokens/status": base.NewStatusREST(stores.Status),
	}
}

// Update makes the token through Create when a server-side apply names
// one that does not exist: made by the store's update, it got no secret,
// stored a token that could never enroll and answered 201 without one.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.UpdateCreatingBy(ctx, r.Create, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// Create stores the token's hash and answers with the token.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	plain, err := secret.New()
	if err != nil {
		return nil, err
	}
	out, err := r.Store.Create(secret.WithHash(ctx, secret.Hash(plain)), obj, createValidation, options)
	if err != nil || len(options.DryRun) > 0 {
		return out, err
	}
	t := out.(*nodusv1.EnrollmentToken).DeepCopy()
	t.Status.Token = TokenPrefix + t.Name + "." + plain
	t.Status.CAFingerprint = r.CAFingerprint
	return t, nil
}
