package base

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Kind describes one resource for NewStore.
type Kind struct {
	Resource     schema.GroupResource // plural, e.g. nodus.dev/reservedhosts
	Singular     schema.GroupResource
	New, NewList func() runtime.Object
	Rules        Rules
	Table        rest.TableConvertor
	// Fields returns the kind's selectable fields beyond metadata.
	Fields func(obj runtime.Object) fields.Set
}

// Stores are the REST storages of one kind: the main resource and, when the
// kind has one, its status subresource.
type Stores struct {
	Main   *genericregistry.Store
	Status *genericregistry.Store
}

// NewStore builds the genericregistry.Store of kind on the server's storage.
func NewStore(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, kind Kind) (Stores, error) {
	if err := selectorsAcceptEveryField(scheme, kind); err != nil {
		return Stores{}, err
	}
	strategy := NewStrategy(scheme, kind.Rules)
	attrs := func(obj runtime.Object) (labels.Set, fields.Set, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("%T is not an object: %w", obj, err)
		}
		set := fields.Set{"metadata.name": m.GetName()}
		if kind.Rules.Namespaced {
			set["metadata.namespace"] = m.GetNamespace()
		}
		if kind.Fields != nil {
			for k, v := range kind.Fields(obj) {
				set[k] = v
			}
		}
		return labels.Set(m.GetLabels()), set, nil
	}
	store := &genericregistry.Store{
		NewFunc:                   kind.New,
		NewListFunc:               kind.NewList,
		DefaultQualifiedResource:  kind.Resource,
		SingularQualifiedResource: kind.Singular,
		PredicateFunc: func(l labels.Selector, f fields.Selector) storage.SelectionPredicate {
			return storage.SelectionPredicate{Label: l, Field: f, GetAttrs: attrs}
		},
		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,
		TableConvertor:      kind.Table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: attrs}); err != nil {
		return Stores{}, err
	}
	stores := Stores{Main: store}
	if kind.Rules.CopySpec != nil {
		status := NewStatusStrategy(scheme, kind.Rules)
		statusStore := *store
		statusStore.CreateStrategy = nil
		statusStore.DeleteStrategy = nil
		statusStore.UpdateStrategy = status
		statusStore.ResetFieldsStrategy = status
		stores.Status = &statusStore
	}
	return stores, nil
}

// selectorsAcceptEveryField refuses a kind whose stores select on fields
// the field selectors refuse, or the other way round (nodusv1's
// SelectableFields, which the scheme's conversions accept): a field only
// the store knows is refused with 400 "not supported", one only the
// selectors know never matches.
func selectorsAcceptEveryField(scheme *runtime.Scheme, kind Kind) error {
	kinds, _, err := scheme.ObjectKinds(kind.New())
	if err != nil {
		return err
	}
	var stored []string
	if kind.Fields != nil {
		for f := range kind.Fields(kind.New()) {
			stored = append(stored, f)
		}
	}
	accepted := slices.Clone(nodusv1.SelectableFields(kinds[0].Kind))
	slices.Sort(stored)
	slices.Sort(accepted)
	if !slices.Equal(stored, accepted) {
		return fmt.Errorf("%s: the store selects on %v, field selectors accept %v", kinds[0].Kind, stored, accepted)
	}
	return nil
}
