package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/docs"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	allocationcontroller "github.com/nodus-dev/nodus/pkg/controller/allocation"
	"github.com/nodus-dev/nodus/pkg/controller/leader"
	"github.com/nodus-dev/nodus/pkg/controller/nodeliveness"
	projectcontroller "github.com/nodus-dev/nodus/pkg/controller/project"
	reservationcontroller "github.com/nodus-dev/nodus/pkg/controller/reservation"
	schedulercontroller "github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/ironic"
	"github.com/nodus-dev/nodus/pkg/jsonlist"
	"github.com/nodus-dev/nodus/pkg/localinformers"
	"github.com/nodus-dev/nodus/pkg/projectsweep"
	"github.com/nodus-dev/nodus/pkg/registry/accesstoken"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
	"github.com/nodus-dev/nodus/pkg/registry/enrollmenttoken"
	"github.com/nodus-dev/nodus/pkg/registry/execution"
	"github.com/nodus-dev/nodus/pkg/registry/namespace"
	"github.com/nodus-dev/nodus/pkg/registry/node"
	"github.com/nodus-dev/nodus/pkg/registry/project"
	"github.com/nodus-dev/nodus/pkg/registry/reservation"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
	"github.com/nodus-dev/nodus/pkg/settle"
	"github.com/nodus-dev/nodus/pkg/storagespace"
)

const (
	etcdStopTimeout = 10 * time.Second
	// etcdSpaceInterval is how often etcd's members publish their size
	// and are warned about near their quota (storagespace), and the
	// embedded one, when full, is checked for room made
	// (embeddedetcd.KeepSpace).
	etcdSpaceInterval = 5 * time.Second
	controllerWorkers = 4
	// allocationWorkers is how many pending allocations are claimed at
	// once. A pass is two writes in a row (the node's claim, then the
	// allocation's status), each a round trip through the API to etcd, so
	// the passes in flight bound how fast the leader takes what every
	// replica accepts: at 16, with two servers on one etcd, allocations
	// queued at the leader for 0.5-0.6 s (nodus-bench, docs/performance.md).
	// Workers rather than batches: a worker takes the next allocation as
	// soon as its last is written, where a batch would wait for its slowest
	// claim.
	allocationWorkers = 64
	// settleWithin bounds how long a server waits to go quiet after a fill
	// (settleAfterFill).
	settleWithin = 2 * time.Minute
	// listJSONCacheBytes bounds the JSON kept of listed objects (package
	// jsonlist): at about 1.2 KB an object, a fleet's 10,000 Nodes and
	// 10,000 ReservedHosts fit in one of its two generations.
	listJSONCacheBytes = 64 << 20
)

// CompletedConfig can only be made by Complete.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	*Config
	generic genericapiserver.CompletedConfig
	// loopbackHandler serves the loopback's requests in process: the
	// generic server's full handler chain.
	loopbackHandler http.Handler
	// typeConverter is the field managers' (from the group's OpenAPI),
	// once the group is installed.
	typeConverter managedfields.TypeConverter
}

// Complete fills in the generic server's derived settings.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{&completedConfig{Config: c, generic: c.Generic.Complete(nil)}}
}

// Server is a nodus-server ready to run.
type Server struct {
	generic *genericapiserver.GenericAPIServer
	config  *Config
}

// New installs the nodus.dev/v1 group, the namespaces projection and the
// docs pages on a new generic API server.
func (c CompletedConfig) New() (srv *Server, err error) {
	defer func() {
		if err != nil {
			// Nothing will Run: etcd (embedded, or the client) stops here.
			c.storage.close(context.Background())
		}
	}()
	generic, err := c.generic.New("nodus-server", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(nodusv1.GroupName, c.Scheme, metav1.ParameterCodec, c.Codecs)
	// Every Nodus kind's reads return the stored object as it is (no
	// registry changes an object on its way out), so a JSON LIST writes each
	// item's JSON once per resourceVersion (package jsonlist). A kind whose
	// reads change it per request must be left out of jsonlist.Lists; a store
	// with the library's hook for that is refused here.
	if err := noStoreChangesReads(c.Stores); err != nil {
		return nil, err
	}
	group.NegotiatedSerializer = jsonlist.NegotiatedSerializer(c.Codecs, jsonlist.NewCache(listJSONCacheBytes),
		jsonlist.Lists(c.Scheme, nodusv1.SchemeGroupVersion))
	storage := map[string]rest.Storage{}
	for path, s := range c.Stores.Pools.Storage("pools") {
		storage[path] = s
	}
	for path, s := range node.Storage(c.Stores.Nodes) {
		storage[path] = s
	}
	for path, s := range reservation.Storage(c.Stores.Reservations) {
		storage[path] = s
	}
	sweeps := project.Sweeps{
		Unmade: func(ctx context.Context, name string) error {
			return projectsweep.SweepUnmade(ctx, c.storage.client, projectLayout, name)
		},
		Made: func(ctx context.Context, name string, madeAt int64) error {
			return projectsweep.Sweep(ctx, c.storage.client, projectLayout, name, madeAt)
		},
	}
	for path, s := range project.Storage(c.Stores.Projects, c.Stores.Reservations, sweeps) {
		storage[path] = s
	}
	for path, s := range accesstoken.Storage(c.Stores.AccessTokens) {
		storage[path] = s
	}
	allocationStorage := allocation.Storage(c.Stores.Allocations, c.Stores.Nodes, c.storage.client)
	for path, s := range allocationStorage {
		storage[path] = s
	}
	for path, s := range execution.Storage(c.Stores.Executions, c.Stores.Reservations, c.Stores.Nodes, c.executionLogs) {
		storage[path] = s
	}
	for path, s := range c.Stores.HostLendings.Storage("hostlendings", "lending") {
		storage[path] = s
	}
	for path, s := range reservedhost.Storage(c.Stores.ReservedHosts, c.Stores.Reservations, c.Stores.Nodes,
		c.Stores.Pools, c.Stores.HostLendings, c.Stores.Executions, c.Stores.getters(), c.Stores.getters(), c.sshCA) {
		storage[path] = s
	}
	for path, s := range enrollmenttoken.Storage(c.Stores.EnrollmentTokens, c.ca.Fingerprint()) {
		storage[path] = s
	}
	storage["nodes/enroll"] = &node.EnrollREST{Tokens: c.Stores.EnrollmentTokens.Status,
		Nodes: c.Stores.Nodes.Main, NodeStatus: c.Stores.Nodes.Status, CA: c.ca, Validity: c.agentCertValidity}
	storage["nodes/renew"] = &node.RenewREST{Nodes: c.Stores.Nodes.Main, CA: c.ca, Validity: c.agentCertValidity}
	storage["nodes/clean"] = &node.CleanREST{Nodes: c.Stores.Nodes.Status}
	heartbeats := &node.HeartbeatREST{
		Nodes: c.Stores.Nodes.Status, NodeSpecs: c.Stores.Nodes.Main, Reservations: c.Stores.Reservations.Status, Liveness: c.liveness,
		Interval: c.heartbeatInterval,
	}
	storage["nodes/heartbeat"] = heartbeats
	c.beats.filter.Serve(heartbeats)
	if err := everyResourceReportsReadiness(storage); err != nil {
		return nil, err
	}
	group.VersionedResourcesStorageMap[nodusv1.SchemeGroupVersion.Version] = storage
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	// The converter the field manager uses, from the spec it was built on.
	converter, err := managedfields.NewTypeConverter(group.StaticOpenAPISpec, false)
	if err != nil {
		return nil, err
	}
	c.schemas.Set(converter)
	c.typeConverter = converter

	legacy := genericapiserver.NewDefaultAPIGroupInfo("", c.Scheme, metav1.ParameterCodec, c.Codecs)
	legacy.NegotiatedSerializer = c.Codecs
	legacy.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"namespaces": namespace.NewREST(c.Stores.Projects.Main),
	}
	if err := generic.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &legacy); err != nil {
		return nil, err
	}

	generic.Handler.NonGoRestfulMux.HandlePrefix("/docs/errors/", http.HandlerFunc(serveErrorDoc))
	// Who the caller is, for `nodus whoami`.
	generic.Handler.NonGoRestfulMux.Handle("/whoami", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, ok := genericapirequest.UserFrom(req.Context())
		if !ok {
			http.Error(w, "no user", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]interface{}{"username": u.GetName(), "groups": u.GetGroups()})
	}))
	// The SSH user CA's public key goes into every host's TrustedUserCAKeys.
	generic.Handler.NonGoRestfulMux.Handle("/ssh-user-ca.pub", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(c.sshCA.PublicKey + "\n"))
	}))
	// The CA is public: agents fetch it and compare it with the fingerprint they were given.
	generic.Handler.NonGoRestfulMux.Handle("/ca.crt", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(c.ca.CertPEM)
	}))
	bareMetal := &ironic.Handler{
		Nodes: c.Stores.Nodes.Main, Allocations: allocationStorage["allocations"].(*allocation.REST),
	}
	generic.Handler.NonGoRestfulMux.Handle(ironic.Prefix, bareMetal)
	generic.Handler.NonGoRestfulMux.HandlePrefix(ironic.Prefix+"/", bareMetal)
	c.paths.set(generic.ListedPaths())
	// The loopback reaches the same handler chain the secure port serves.
	c.loopbackHandler = generic.Handler
	// Heartbeat streams are long-running: shutdown does not wait for them,
	// and each would hold the listener's until its agent's next beat.
	if err := generic.AddPreShutdownHook("nodus-heartbeat-streams", func() error { c.beats.filter.Stop(); return nil }); err != nil {
		return nil, err
	}
	// Until every watch cache is filled, a watch (an agent's, an informer's)
	// is answered 429 and a list with a selector waits: /readyz stays 503 until
	// then, so that a balancer sends nothing to a replica that would turn it
	// away. kube-apiserver registers the same hook; the generic server only
	// collects the checks (InstallAPIGroup).
	if err := generic.AddPostStartHook("storage-readiness", generic.StorageReadinessHook.Hook); err != nil {
		return nil, err
	}
	if err := generic.AddPostStartHook("nodus-controllers", c.startControllers); err != nil {
		return nil, err
	}
	if member := c.storage.embedded; member != nil {
		if err := generic.AddPostStartHook("nodus-etcd-space", func(hook genericapiserver.PostStartHookContext) error {
			go member.KeepSpace(hook, etcdSpaceInterval)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	space := &storagespace.Watcher{Client: c.storage.client, Endpoints: c.storage.servers}
	if err := generic.AddPostStartHook("nodus-etcd-space-watch", func(hook genericapiserver.PostStartHookContext) error {
		go space.Run(hook, etcdSpaceInterval)
		return nil
	}); err != nil {
		return nil, err
	}
	// Every replica cuts its own open watches whose access ended, as its
	// own stores show the change.
	if err := generic.AddPostStartHook("nodus-revocation", func(hook genericapiserver.PostStartHookContext) error {
		client, err := loopbackClientset(hook.LoopbackClientConfig, c.loopbackHandler)
		if err != nil {
			return err
		}
		factory := localinformers.NewFactory(
			externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTransform(revocationView)), c.Stores.Sources())
		if err := c.watches.Follow(hook, factory); err != nil {
			return err
		}
		go settleAfterFill(hook, factory)
		return nil
	}); err != nil {
		return nil, err
	}
	return &Server{generic: generic, config: c.Config}, nil
}

// everyResourceReportsReadiness refuses a resource whose storage would be
// left out of the storage-readiness hook: a registry that wraps its store
// without passing its ReadinessCheck on would make /readyz answer before that
// resource's watch cache serves.
func everyResourceReportsReadiness(storage map[string]rest.Storage) error {
	for path, s := range storage {
		if strings.Contains(path, "/") {
			continue // a subresource: its resource's check covers the cache
		}
		if _, reports := s.(rest.StorageWithReadiness); !reports {
			return fmt.Errorf("the storage of %s (%T) has no ReadinessCheck", path, s)
		}
	}
	return nil
}

// LoopbackConfig is a client configuration with the server's own identity,
// the one its controllers write with: what no operator's credential may
// write (a node's claims), it may. Tests run a controller of their own as
// another replica of the server would.
func (s *Server) LoopbackConfig() *restclient.Config {
	return restclient.CopyConfig(s.generic.LoopbackClientConfig)
}

// Run serves until ctx is done, then stops the API server and, after it,
// the embedded etcd.
func (s *Server) Run(ctx context.Context) error {
	s.config.out("nodus-server: serving on %s", s.config.URL)
	s.config.out("admin kubeconfig: %s", s.config.KubeconfigPath)
	s.config.out("try: kubectl --kubeconfig %s get reservedhosts -A", s.config.KubeconfigPath)
	if s.config.identityCreated {
		s.config.out("cluster identity: made by this replica and stored in etcd, sealed with the cluster key")
	}
	if s.config.joinCommand != "" {
		s.config.out("start another replica of this cluster (with its own --tls-san names, and --bind-address if it binds one address) with: %s", s.config.joinCommand)
	}
	// In-flight idempotent requests name this boot of this replica. The
	// registration outlives ctx: a stop drains the requests in flight
	// (their listener closed), and a peer must not take their keys over
	// meanwhile, so it is marked draining then, and kept until they are
	// done.
	registered, deregister := context.WithCancel(context.WithoutCancel(ctx))
	defer deregister()
	if err := s.config.idempotent.Register(registered, s.config.replicaID, s.config.replicaAddress); err != nil {
		s.config.storage.close(context.Background())
		return fmt.Errorf("register the replica in etcd: %w", err)
	}
	go func() {
		<-ctx.Done()
		if err := s.config.idempotent.Drain(registered); err != nil && registered.Err() == nil {
			klog.ErrorS(err, "marking the replica draining")
		}
	}()
	go s.config.renewCredentials(ctx)
	err := s.generic.PrepareRun().RunWithContext(ctx)
	deregister() // the requests are done: the registration lapses with its lease (seconds)
	// etcd outlives the API server, on its own deadline.
	stopCtx, cancel := context.WithTimeout(context.Background(), etcdStopTimeout)
	defer cancel()
	s.config.storage.close(stopCtx)
	return err
}

// serveErrorDoc serves docs/errors/{reason}.md for a registered reason.
func serveErrorDoc(w http.ResponseWriter, req *http.Request) {
	reason := strings.TrimPrefix(req.URL.Path, "/docs/errors/")
	if !apierror.IsRegistered(metav1.StatusReason(reason)) {
		http.NotFound(w, req)
		return
	}
	page, err := fs.ReadFile(docs.ErrorPages, "errors/"+reason+".md")
	if err != nil {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	_, _ = w.Write(page)
}

// startControllers runs the controllers on the replica that wins the
// election, and on every replica the recorder of nodes' last beats. They
// write through the loopback, like any client (the allocation controller
// in process, package localwrite), and read from informers fed by this
// replica's stores.
func (c *completedConfig) startControllers(hook genericapiserver.PostStartHookContext) error {
	client, err := loopbackClientset(hook.LoopbackClientConfig, c.loopbackHandler)
	if err != nil {
		return err
	}
	// Every replica records the last beats it heard of nodes that die; the
	// leading one's liveness controller does so with the NotReady.
	var leading atomic.Bool
	recorder := &nodeliveness.Recorder{Client: client, Liveness: c.liveness, Leading: leading.Load}
	go recorder.Run(hook.Context)
	go leader.Run(hook, c.storage.client, c.leaderLease, func(ctx context.Context) {
		leading.Store(true)
		defer leading.Store(false)
		factory := localinformers.NewFactory(
			externalversions.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, externalversions.WithTransform(withoutManagedFields)), c.Stores.Sources())
		reservations, err := reservationcontroller.New(client, factory)
		if err != nil {
			klog.ErrorS(err, "reservation controller")
			return
		}
		reservations.PredatesProject = func(ctx context.Context, reservation, project string) (bool, error) {
			return projectsweep.Predates(ctx, c.storage.client, projectLayout, reservationsPrefix+reservation, project)
		}
		allocations, err := allocationcontroller.New(client, factory)
		if err != nil {
			klog.ErrorS(err, "allocation controller")
			return
		}
		if allocations.Writes, err = c.allocationWrites(hook.LoopbackClientConfig); err != nil {
			klog.ErrorS(err, "allocation controller")
			return
		}
		scheduler, err := schedulercontroller.New(client, factory, c.storage.client)
		if err != nil {
			klog.ErrorS(err, "scheduler")
			return
		}
		projects, err := projectcontroller.New(client, factory, c.storage.client, []string{executionlog.Prefix, idempotency.Prefix}, projectLayout)
		if err != nil {
			klog.ErrorS(err, "project controller")
			return
		}
		nodes := factory.Nodus().V1().Nodes()
		liveness := &nodeliveness.Controller{Client: client, Nodes: nodes.Lister(), Synced: nodes.Informer().HasSynced,
			Liveness: c.liveness, Resync: c.heartbeatInterval, Now: time.Now}
		factory.Start(ctx.Done())
		go settleAfterFill(ctx, factory)
		// The lead is handed on (resigned) once this returns: after the
		// controllers' last writes, not beside them.
		var controllers sync.WaitGroup
		controllers.Go(func() { allocations.Run(ctx, allocationWorkers) })
		controllers.Go(func() { scheduler.Run(ctx) })
		controllers.Go(func() { projects.Run(ctx, controllerWorkers) })
		controllers.Go(func() { liveness.Run(ctx) })
		reservations.Run(ctx, controllerWorkers)
		controllers.Wait()
		factory.Shutdown()
	})
	return nil
}

// settleAfterFill gives the memory that filling factory's informers left
// free back to the system, once they are filled and the server has gone
// quiet (pkg/settle): on the leader, that is after the controllers have
// been through everything once. A server that is never quiet for long
// enough is busy, and its collections follow GOGC anyway.
func settleAfterFill(ctx context.Context, factory externalversions.SharedInformerFactory) {
	for _, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	if settle.AfterQuiet(ctx, settle.Default, settle.Release) {
		klog.V(2).InfoS("gave the start-up's free memory back to the system")
	}
}

// withoutManagedFields drops the managedFields the controllers never read
// from their informers' copies (with revocationView, 45 MB less at 10,000
// reserved nodes in nodus-bench's memory scenario). The controllers' writes
// do not lose them: an update that sends none keeps the stored ones. Of a
// ReservedHost's, the release-capacity entries stay: the reservation
// controller compares them with its reservation's release, and adds the
// missing ones to the host as stored.
func withoutManagedFields(obj interface{}) (interface{}, error) {
	if h, isHost := obj.(*nodusv1.ReservedHost); isHost {
		kept := slices.DeleteFunc(h.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Subresource != reservedhost.ReleaseSubresource
		})
		// A copy, so that the decoded array of every entry is not kept.
		h.ManagedFields = nil
		if len(kept) > 0 {
			h.ManagedFields = slices.Clone(kept)
		}
		return h, nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// revocationView keeps of a Node what the revocation's handlers compare
// (its identity and agent generation): they hold every node, and read
// nothing else of it.
func revocationView(obj interface{}) (interface{}, error) {
	n, ok := obj.(*nodusv1.Node)
	if !ok {
		return withoutManagedFields(obj)
	}
	return &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, DeletionTimestamp: n.DeletionTimestamp},
		Status:     nodusv1.NodeStatus{AgentGeneration: n.Status.AgentGeneration},
	}, nil
}

// reservationsPrefix is where Reservations are in etcd; the name follows.
const reservationsPrefix = etcdPrefix + "/" + nodusv1.GroupName + "/reservations/"

// projectLayout is where projects and what their namespaces hold are in
// etcd, for the sweep of what an earlier project of a name left.
var projectLayout = projectsweep.Layout{
	Projects: etcdPrefix + "/" + nodusv1.GroupName + "/projects/",
	Namespaced: []string{
		etcdPrefix + "/" + nodusv1.GroupName + "/executions/",
		etcdPrefix + "/" + nodusv1.GroupName + "/reservedhosts/",
		etcdPrefix + "/" + nodusv1.GroupName + "/hostlendings/",
		executionlog.Prefix,
		idempotency.Prefix,
	},
}
