package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	etcdclient "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/recognizer"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/liveness"
	"github.com/nodus-dev/nodus/pkg/typemeta"
)

const (
	etcdPrefix       = "/registry" // keys are /registry/nodus.dev/<resource>/[<namespace>/]<name>
	etcdReadyTimeout = time.Minute
)

// storage is where the server keeps everything: the embedded etcd member
// it runs, or an external cluster; and a client of it, with its lease
// service. A server calls its embedded member in process.
type storage struct {
	servers  []string
	tls      transport.TLSInfo
	embedded *embeddedetcd.Server
	client   *etcdclient.Client
	leases   pb.LeaseClient
	// stores is how the API's stores reach an embedded member; nil on an
	// external cluster, where the library's own clients reach it.
	stores *inProcessStores
}

// openStorage starts embedded etcd or reaches the external cluster, and
// checks that it answers.
func (o *Options) openStorage(ctx context.Context) (st *storage, err error) {
	st = &storage{servers: o.EtcdServers, tls: transport.TLSInfo{TrustedCAFile: o.EtcdCAFile, CertFile: o.EtcdCertFile, KeyFile: o.EtcdKeyFile}}
	defer func() {
		if err != nil {
			st.close(context.Background())
		}
	}()
	if o.embeddedEtcd() {
		if st.embedded, err = embeddedetcd.StartWithQuota(filepath.Join(o.DataDir, "etcd"), etcdReadyTimeout, o.EmbeddedEtcdQuotaBytes); err != nil {
			return st, err
		}
		st.servers = []string{st.embedded.ClientURL}
		if c := st.embedded.TLS; c != nil {
			st.tls = transport.TLSInfo{TrustedCAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
		}
	}
	var tlsConfig *tls.Config
	if !st.tls.Empty() || st.tls.TrustedCAFile != "" {
		if tlsConfig, err = st.tls.ClientConfig(); err != nil {
			return st, fmt.Errorf("etcd client TLS (--etcd-cafile, --etcd-certfile, --etcd-keyfile): %w", err)
		}
	}
	if err := probe(ctx, st.servers, tlsConfig, o.EtcdProbeTimeout); err != nil {
		return st, err
	}
	if st.embedded != nil {
		st.client, st.leases = st.embedded.InProcessClient(), st.embedded.InProcessLeaseClient()
		st.stores = &inProcessStores{member: st.embedded}
		return st, nil
	}
	st.client, err = newEtcdClient(st.servers, tlsConfig)
	if err != nil {
		return st, fmt.Errorf("etcd client: %w", err)
	}
	st.leases = liveness.LeaseService(st.client)
	return st, nil
}

// The keep-alive of Nodus' own etcd client, as the apiserver's storage
// client has it (storagebackend/factory): without pings, a connection to a
// member that hangs without closing it (stopped, powered off, cut off by a
// firewall that drops) is never given up, and every call the client sends
// there (a beat's lease keep-alive, an idempotency record, the election)
// waits for its own deadline, or for ever. Variables for the test.
var etcdKeepAliveTime, etcdKeepAliveTimeout = 30 * time.Second, 10 * time.Second

// newEtcdClient is Nodus' own client of an external etcd: liveness leases,
// idempotency records, leader election, replica registration.
func newEtcdClient(endpoints []string, tlsConfig *tls.Config) (*etcdclient.Client, error) {
	return etcdclient.New(etcdclient.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: etcdKeepAliveTime, DialKeepAliveTimeout: etcdKeepAliveTimeout, Logger: zap.NewNop()})
}

// applyTo makes the generic server keep its objects in this etcd.
func (st *storage) applyTo(generic *genericapiserver.Config, scheme *runtime.Scheme, codecs serializer.CodecFactory) error {
	etcdOpts := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(etcdPrefix, storageCodec(scheme, codecs)))
	t := &etcdOpts.StorageConfig.Transport
	t.ServerList = st.servers
	t.CertFile, t.KeyFile, t.TrustedCAFile = st.tls.CertFile, st.tls.KeyFile, st.tls.TrustedCAFile
	etcdOpts.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(nodusv1.SchemeGroupVersion,
		schema.GroupKind{Group: nodusv1.GroupName})
	// No garbage collector runs here: with collection on, a delete asking to
	// orphan dependents or delete them first (kubectl --cascade=orphan or
	// foreground) left a finalizer that only a collector removes, and the
	// object deleting for ever (a borrower's execution still placed, a
	// reservation still granting access).
	etcdOpts.EnableGarbageCollection = false
	if err := etcdOpts.ApplyTo(generic); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if st.stores != nil {
		st.stores.watchCache = etcdOpts.EnableWatchCache
		generic.RESTOptionsGetter = st.stores.options(generic.RESTOptionsGetter)
	}
	return nil
}

// close ends the clients and then the embedded member, if any.
func (st *storage) close(ctx context.Context) {
	if st.client != nil {
		st.client.Close()
	}
	if st.stores != nil {
		st.stores.close()
	}
	if st.embedded != nil {
		st.embedded.Stop(ctx)
	}
}

// storageCodec is codecs.LegacyCodec(nodus.dev/v1) reading what the server
// stored with typemeta's serializer: the server wrote it, kind and apiVersion
// first, and every object the watch caches take from etcd (all of them at a
// restart) is then read once instead of twice (docs/performance.md). What is
// not JSON still goes to the codecs' universal decoder.
func storageCodec(scheme *runtime.Scheme, codecs serializer.CodecFactory) runtime.Codec {
	stored := typemeta.Serializer(scheme)
	return versioning.NewDefaultingCodecForScheme(scheme, stored, recognizer.NewDecoder(stored, codecs.UniversalDeserializer()),
		nodusv1.SchemeGroupVersion, runtime.InternalGroupVersioner)
}

// projectBirths tells when a project was made: its key's create revision
// (package projecthistory).
type projectBirths struct{ kv etcdclient.KV }

func (b projectBirths) ProjectMadeAt(ctx context.Context, project string) (int64, error) {
	resp, err := b.kv.Get(ctx, etcdPrefix+"/"+nodusv1.GroupName+"/projects/"+project, etcdclient.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].CreateRevision, nil
}
