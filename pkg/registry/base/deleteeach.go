package base

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// DeleteEach deletes what listOptions selects one by one through del, and
// answers the list of what it deleted, or the first refusal once it has
// tried them all. A registry that checks a delete in its own Delete needs it
// for DeleteCollection: the generic store's calls the store's Delete, and
// would pass over the check.
func DeleteEach(ctx context.Context, list rest.Lister, del rest.GracefulDeleter, deleteValidation rest.ValidateObjectFunc,
	options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	if listOptions == nil {
		listOptions = &metainternalversion.ListOptions{}
	} else {
		listOptions = listOptions.DeepCopy()
	}
	// Every page: the collection is what the selectors name, not a page of it.
	listOptions.Limit, listOptions.Continue = 0, ""
	listed, err := list.List(ctx, listOptions)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(listed)
	if err != nil {
		return nil, err
	}
	if options == nil {
		options = &metav1.DeleteOptions{}
	}
	var deleted []runtime.Object
	var refusal error
	for _, item := range items {
		accessor, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		_, _, err = del.Delete(ctx, accessor.GetName(), deleteValidation, options.DeepCopy())
		switch {
		case err == nil:
			deleted = append(deleted, item)
		case apierrors.IsNotFound(err): // deleted meanwhile
		case refusal == nil:
			refusal = err
		}
	}
	if refusal != nil {
		return nil, refusal
	}
	if err := meta.SetList(listed, deleted); err != nil {
		return nil, err
	}
	return listed, nil
}
