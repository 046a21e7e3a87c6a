// Package localinformers feeds the informers of the server's own
// controllers and revocation from its registry stores, in process: the watch
// caches, without a round trip through its HTTP API.
//
// Through the loopback, every change the informers watch was encoded to JSON
// once and decoded once per informer, over TLS and HTTP/2, and a restarted
// server decoded every object again to fill them (docs/performance.md). Here
// an informer receives the cached object's deep copy instead.
//
// Each informer owns what it holds, as it did over HTTP: the watch caches'
// objects are what every GET returns, so nothing of theirs is handed out.
package localinformers

import (
	"context"
	"fmt"
	"reflect"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions/internalinterfaces"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions/nodus"
	"github.com/nodus-dev/nodus/pkg/watchfilter"
)

// Source lists and watches one resource in every namespace: a registry
// store, whose reads the watch cache serves.
type Source interface {
	rest.Lister
	rest.Watcher
}

// Sources are the stores by the type of object they hold (*nodusv1.Node
// for the nodes' store).
type Sources map[reflect.Type]Source

// Factory is an informer factory whose informers of a type in sources read
// that source; informers of any other type go through the factory's client,
// as the generated factory does. Its transform and resync apply to both.
type Factory struct {
	externalversions.SharedInformerFactory
	sources Sources
}

// NewFactory wraps factory, which must watch every namespace with no tweak
// of its list options (a store serves them all).
func NewFactory(factory externalversions.SharedInformerFactory, sources Sources) *Factory {
	return &Factory{SharedInformerFactory: factory, sources: sources}
}

// Nodus returns the typed informers, built through f so that InformerFor
// below chooses their source.
func (f *Factory) Nodus() nodus.Interface {
	return nodus.New(f, metav1.NamespaceAll, nil)
}

// InformerFor returns the shared informer of obj's type: fed by its source
// when there is one.
func (f *Factory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	source, ok := f.sources[reflect.TypeOf(obj)]
	if !ok {
		return f.SharedInformerFactory.InformerFor(obj, newFunc)
	}
	return f.SharedInformerFactory.InformerFor(obj, func(_ versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(ListerWatcher(source), obj, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
}

// ListerWatcher lists and watches source for a reflector. What it returns
// is the caller's own: a list is deep-copied (the watch cache's list shares
// every nested field with the cached objects), and a watch event's object is
// the copy the watch cache makes for each watcher.
func ListerWatcher(source Source) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			opts, err := internalOptions(options)
			if err != nil {
				return nil, err
			}
			list, err := source.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), opts)
			if err != nil {
				return nil, err
			}
			return list.DeepCopyObject(), nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			opts, err := internalOptions(options)
			if err != nil {
				return nil, err
			}
			w, err := source.Watch(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), opts)
			if err != nil {
				return nil, err
			}
			return watchfilter.Filter(w, func(e watch.Event) (watch.Event, bool) { return unwrapped(e), true }), nil
		},
	}
}

// unwrapped replaces the watch cache's wrapper of an event's object, which
// caches its serializations for HTTP watchers, by the object: a deep copy.
func unwrapped(event watch.Event) watch.Event {
	if cacheable, ok := event.Object.(runtime.CacheableObject); ok {
		event.Object = cacheable.GetObject()
	}
	return event
}

func internalOptions(options metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	var out metainternalversion.ListOptions
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&options, &out, nil); err != nil {
		return nil, fmt.Errorf("list options: %w", err)
	}
	return &out, nil
}
