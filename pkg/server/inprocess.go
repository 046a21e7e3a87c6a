package server

import (
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	apistorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	identitytransformer "k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
)

// inProcessStores builds the API's stores on the embedded member with
// clients that call it in process (embeddedetcd.InProcessClient), where the
// library would dial the member's TLS port. Everything above the client is
// the library's: etcd3's store, its watch cache and cache delegator, the
// codec, transformer and lease settings of each resource's storage config.
// What the library keeps per endpoint, the compactor, is kept once here,
// as in-process clients have no endpoint.
type inProcessStores struct {
	member     *embeddedetcd.Server
	watchCache bool

	mu              sync.Mutex
	compactor       compactor
	compactorClient *clientv3.Client
}

type compactor interface {
	etcd3.Compactor
	Stop()
}

// options makes the stores of next's options use the member in process.
func (s *inProcessStores) options(next generic.RESTOptionsGetter) generic.RESTOptionsGetter {
	return inProcessOptions{next: next, stores: s}
}

type inProcessOptions struct {
	next   generic.RESTOptionsGetter
	stores *inProcessStores
}

func (o inProcessOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := o.next.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = o.stores.decorate
	return opts, nil
}

// decorate is genericregistry.StorageWithCacher (or, without the watch
// cache, generic.UndecoratedStorage) on an in-process client.
func (s *inProcessStores) decorate(config *storagebackend.ConfigForResource, resourcePrefix string,
	keyFunc func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
	getAttrs apistorage.AttrFunc, triggers apistorage.IndexerFuncs, indexers *cache.Indexers,
) (apistorage.Interface, factory.DestroyFunc, error) {
	raw, destroyRaw, err := s.rawStorage(config, newFunc, newListFunc, resourcePrefix)
	if err != nil || !s.watchCache {
		return raw, destroyRaw, err
	}
	watchCache, err := cacher.NewCacherFromConfig(cacher.Config{
		Storage:             raw,
		Versioner:           apistorage.APIObjectVersioner{},
		GroupResource:       config.GroupResource,
		EventsHistoryWindow: config.EventsHistoryWindow,
		ResourcePrefix:      resourcePrefix,
		KeyFunc:             keyFunc,
		NewFunc:             newFunc,
		NewListFunc:         newListFunc,
		GetAttrsFunc:        getAttrs,
		IndexerFuncs:        triggers,
		Indexers:            indexers,
		Codec:               config.Codec,
	})
	if err != nil {
		destroyRaw()
		return nil, func() {}, err
	}
	delegator := cacher.NewCacheDelegator(watchCache, raw)
	var once sync.Once
	return delegator, func() {
		once.Do(func() {
			delegator.Stop()
			watchCache.Stop()
			destroyRaw()
		})
	}, nil
}

// rawStorage is the library's etcd3 storage (factory.Create) on a client
// of its own, as there, but one that calls the member in process.
func (s *inProcessStores) rawStorage(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object,
	resourcePrefix string,
) (apistorage.Interface, factory.DestroyFunc, error) {
	if config.Type != storagebackend.StorageTypeUnset && config.Type != storagebackend.StorageTypeETCD3 {
		return nil, nil, fmt.Errorf("storage type %q: the embedded etcd is etcd3", config.Type)
	}
	compactor := s.sharedCompactor(config)
	client := &kubernetes.Client{Client: s.member.InProcessClient()}
	client.Kubernetes = client
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)

	transformer := config.Transformer
	if transformer == nil {
		transformer = identitytransformer.NewEncryptCheckTransformer()
	}
	versioner := apistorage.APIObjectVersioner{}
	decoder := etcd3.NewDefaultDecoder(config.Codec, versioner)
	unsafeDeletion := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion)
	if unsafeDeletion {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	store, err := etcd3.New(client, compactor, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix,
		config.GroupResource, transformer, config.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	// etcd3.New asks each endpoint of its client for etcd's version, to know
	// whether the watch cache may serve consistent reads (etcd answers
	// progress requests correctly since 3.4.31 and 3.5.13). An in-process
	// client has no endpoint, and without an answer every LIST would go to
	// etcd and decode every object.
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(client.Ctx(), inProcessEndpoint{client.Client}, apistorage.RequestWatchProgress)
	var once sync.Once
	destroy := func() {
		// The library destroys a storage once per subresource sharing it.
		once.Do(func() {
			store.Close()
			_ = client.Close()
		})
	}
	var storage apistorage.Interface = store
	if unsafeDeletion {
		storage = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(storage, config.GroupResource)
	}
	return storage, destroy, nil
}

// inProcessEndpoint names the member for the library's feature checker,
// which asks each endpoint of a client for its Status.
type inProcessEndpoint struct{ *clientv3.Client }

func (inProcessEndpoint) Endpoints() []string { return []string{"embedded-etcd-in-process"} }

// sharedCompactor is the one compactor of every store, started by the
// first. It returns nil, as the library does, when compaction is off.
func (s *inProcessStores) sharedCompactor(config *storagebackend.ConfigForResource) etcd3.Compactor {
	if config.CompactionInterval == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compactor == nil {
		s.compactorClient = s.member.InProcessClient()
		s.compactor = etcd3.NewCompactor(s.compactorClient, config.CompactionInterval, clock.RealClock{}, nil)
	}
	return s.compactor
}

// close stops the compactor; the stores' clients end with their stores.
func (s *inProcessStores) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compactor != nil {
		s.compactor.Stop()
		_ = s.compactorClient.Close()
		s.compactor, s.compactorClient = nil, nil
	}
}
