package base

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Update is the store's, with a patch that cannot be applied answered 400.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.Store.Update(ctx, name, PatchRefusals(ctx, objInfo), createValidation, updateValidation, forceAllowCreate, options)
}

// PatchRefusals answers 400 BadRequest for a patch the library fails to
// apply with an error of no status: it maps only some of a strategic merge
// patch's errors, and answered the others (an unknown $patch directive, an
// order or deletion list for a field the kind does not have, a list item
// without its merge key) 500 InternalError. A patch's other errors (JSON
// patch, merge patch, apply, admission) already carry their status and
// pass as they are; so does every error of an update that is not a patch.
func PatchRefusals(ctx context.Context, objInfo rest.UpdatedObjectInfo) rest.UpdatedObjectInfo {
	// A resource's only: the Ironic API's PATCH (/v1, no resource request)
	// applies its own JSON patch, and answers its own errors.
	if info, ok := request.RequestInfoFrom(ctx); ok && info.IsResourceRequest && info.Verb == "patch" {
		return patchRefusals{objInfo}
	}
	return objInfo
}

type patchRefusals struct{ rest.UpdatedObjectInfo }

func (p patchRefusals) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	obj, err := p.UpdatedObjectInfo.UpdatedObject(ctx, old)
	var status apierrors.APIStatus
	if err != nil && !errors.As(err, &status) {
		return nil, apierrors.NewBadRequest("the patch cannot be applied: " + withoutMaps(err.Error()))
	}
	return obj, err
}

// withoutMaps leaves out of the library's message the maps it prints (the
// patch's, or the object's), which may hold what the caller must not see
// repeated in an answer and the audit log: an Execution's environment.
func withoutMaps(msg string) string {
	var b strings.Builder
	for {
		start := strings.Index(msg, "map[")
		if start < 0 {
			b.WriteString(msg)
			return strings.TrimSpace(b.String())
		}
		b.WriteString(msg[:start])
		b.WriteString("{…}")
		depth, end := 0, len(msg)
		for i := start + len("map"); i < len(msg); i++ {
			if msg[i] == '[' {
				depth++
			} else if msg[i] == ']' {
				if depth--; depth == 0 {
					end = i + 1
					break
				}
			}
		}
		msg = msg[end:]
	}
}

// ForCreate readies what an update that creates (a server-side apply of
// an object that does not exist) would store, for a kind that makes it
// through its own Create: as the library's update does when it creates,
// the system fields are wiped and filled again, and a resourceVersion,
// which a manifest read earlier may carry, is cleared (the store's create
// refused it, 500).
func ForCreate(obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	rest.WipeObjectMetaSystemFields(m)
	rest.FillObjectMetaSystemFields(m)
	m.SetResourceVersion("")
	return nil
}

// CreateFunc is a kind's Create.
type CreateFunc func(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error)

// UpdateCreatingBy is Update, but an apply of an object that does not exist
// is made by create (CreateByApply), dry runs too: for a kind whose Create
// does more than the store's (a token's secret).
func (r *REST) UpdateCreatingBy(ctx context.Context, create CreateFunc, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if forceAllowCreate {
		out, made, err := CreateByApply(ctx, r.Store, name, objInfo, func(obj runtime.Object) (runtime.Object, error) {
			return create(ctx, obj, createValidation, CreateOptionsOf(options))
		})
		if made {
			return out, err == nil, err
		}
	}
	return r.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// CreateOptionsOf are the options of a create that an update with
// options makes (a server-side apply of an object that does not exist).
func CreateOptionsOf(options *metav1.UpdateOptions) *metav1.CreateOptions {
	return &metav1.CreateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager, FieldValidation: options.FieldValidation}
}

// CreateByApply makes through create what a server-side apply names when
// it does not exist, for a kind whose Create does more than the store's
// (a project's sweep, an allocation's name claims): made by the store's
// update instead, it would skip that. made is false when the object
// exists (or was made meanwhile): the apply is then the caller's update.
func CreateByApply(ctx context.Context, store *genericregistry.Store, name string, objInfo rest.UpdatedObjectInfo,
	create func(runtime.Object) (runtime.Object, error)) (out runtime.Object, made bool, err error) {
	// An empty resourceVersion reads etcd.
	if _, err := store.Get(ctx, name, &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	obj, err := PatchRefusals(ctx, objInfo).UpdatedObject(ctx, store.New())
	if err != nil {
		return nil, true, err
	}
	if err := ForCreate(obj); err != nil {
		return nil, true, err
	}
	out, err = create(obj)
	if apierrors.IsAlreadyExists(err) {
		return nil, false, nil
	}
	return out, true, err
}
