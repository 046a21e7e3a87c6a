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
	"k8s.io/client-go/tools/cache"

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
	// Indexed is the one field of Fields (the library takes one) whose
	// exact selections the watch cache serves from an index: a watch of
	// one value is sent the events of objects that have it or had it, not
	// every event of the kind, and a LIST of it reads only those objects.
	// Every agent watches its node's objects by such a field; without the
	// index each write was matched against every agent's watch.
	Indexed string
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
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: attrs}
	var indexFields []string
	if f := kind.Indexed; f != "" {
		value := func(obj runtime.Object) string { return kind.Fields(obj)[f] }
		indexFields = []string{f}
		options.TriggerFunc = storage.IndexerFuncs{f: value}
		options.Indexers = &cache.Indexers{storage.FieldIndex(f): func(obj interface{}) ([]string, error) {
			o, ok := obj.(runtime.Object)
			if !ok {
				return nil, fmt.Errorf("%T is not an object", obj)
			}
			return []string{value(o)}, nil
		}}
	}
	store := &genericregistry.Store{
		NewFunc:                   kind.New,
		NewListFunc:               kind.NewList,
		DefaultQualifiedResource:  kind.Resource,
		SingularQualifiedResource: kind.Singular,
		PredicateFunc: func(l labels.Selector, f fields.Selector) storage.SelectionPredicate {
			return storage.SelectionPredicate{Label: l, Field: f, GetAttrs: attrs, IndexFields: indexFields}
		},
		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,
		TableConvertor:      kind.Table,
	}
	if err := store.CompleteWithOptions(options); err != nil {
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
	if kind.Indexed != "" && !slices.Contains(stored, kind.Indexed) {
		return fmt.Errorf("%s: the store indexes %s, which it does not select on (%v)", kinds[0].Kind, kind.Indexed, stored)
	}
	return nil
}
