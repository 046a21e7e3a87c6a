package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"

	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/admission/executionlimit"
	"github.com/nodus-dev/nodus/pkg/admission/lendingpolicy"
	"github.com/nodus-dev/nodus/pkg/admission/nodeclaim"
	"github.com/nodus-dev/nodus/pkg/admission/nodeclass"
	"github.com/nodus-dev/nodus/pkg/admission/nodedeletion"
	"github.com/nodus-dev/nodus/pkg/admission/noderestriction"
	"github.com/nodus-dev/nodus/pkg/admission/projectexists"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/applycheck"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/heartbeatpath"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/ironic"
	"github.com/nodus-dev/nodus/pkg/liveness"
	"github.com/nodus-dev/nodus/pkg/pki"
	"github.com/nodus-dev/nodus/pkg/projecthistory"
	"github.com/nodus-dev/nodus/pkg/requestnamespace"
	"github.com/nodus-dev/nodus/pkg/resourceversion"
	"github.com/nodus-dev/nodus/pkg/revocation"
	"github.com/nodus-dev/nodus/pkg/sshca"
	"github.com/nodus-dev/nodus/pkg/stackgrow"
)

// Config is everything New needs, with storage already reachable.
type Config struct {
	Generic        *genericapiserver.Config
	Scheme         *runtime.Scheme
	Codecs         serializer.CodecFactory
	Stores         *Stores
	KubeconfigPath string
	URL            string

	out     func(format string, args ...interface{})
	storage *storage
	// identityCreated says this replica made the cluster's identity.
	identityCreated bool
	// joinCommand starts another replica; empty on embedded etcd.
	joinCommand string
	// replicaID names this replica across its restarts (DIR/replica-id).
	replicaID string
	// replicaAddress is where peers find this replica's port ("" if unknown).
	replicaAddress string
	idempotent     *idempotency.Store
	// leaderLease is how long a dead leader keeps the controllers.
	leaderLease time.Duration
	// paths is the Kubernetes path index that GET / shows, known once New
	// installed every handler.
	paths *pathIndex
	// beats is the lean heartbeat path, given its storage once New made it.
	beats *leanBeats
	// schemas check server-side apply patches (package applycheck), once
	// the API group is installed.
	schemas *applycheck.Schemas
	// executionLogs keeps the bounded output of executions.
	executionLogs *executionlog.Store

	liveness          *liveness.Tracker
	heartbeatInterval time.Duration
	agentCertValidity time.Duration
	watches           *revocation.Watches
	ca                *pki.CA
	sshCA             *sshca.CA
	// renew issues this replica's certificates anew where they near their
	// end (renewCredentials), and returns the files it wrote.
	renew func() ([]string, error)
}

// actionSubresources are the POST subresources with the action contract
// (200 OK, Idempotency-Key), with the most bytes each takes in a body (0:
// actions.DefaultBodyLimit, 64 KiB).
var actionSubresources = map[string]int64{
	"reservedhosts/release-capacity": 0, "reservedhosts/ssh-certificate": 0, "reservedhosts/lend": 0, "reservedhosts/withdraw": 0,
	"nodes/enroll": 0, "nodes/renew": 0, "nodes/clean": 0, "executions/cancel": 0,
	// A heartbeat carries the cleaning evidence (a 4 KiB output tail and
	// the steps) and one line per reservation on the node.
	"nodes/heartbeat": 256 << 10,
	// A report carries up to 256 KiB of output, which JSON may escape to six times that.
	"executions/report": 2 << 20,
}

// Config reaches etcd, opens the cluster identity, writes this replica's
// credentials and builds the generic server's configuration. On an
// external etcd nothing is written, there or in DIR, before the identity
// opens.
func (o *Options) Config() (cfg *Config, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create --data-dir: %w", err)
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	// JSON, YAML and, for the Nodus types (generated.pb.go) and the core
	// types of the namespaces projection, protobuf.
	codecs := serializer.NewCodecFactory(scheme)

	listener, url, err := o.listen()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			listener.Close()
		}
	}()
	ctx := context.Background()
	st, err := o.openStorage(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.close(context.Background())
		}
	}()
	id, err := o.loadIdentity(ctx, st)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, kubeconfig, err := o.writeCredentials(id, url)
	if err != nil {
		return nil, err
	}
	renew := func() ([]string, error) {
		renewed, err := o.renewCredentials(id, url)
		if err != nil || st.embedded == nil {
			return renewed, err
		}
		member, err := st.embedded.RenewCertificates()
		return append(renewed, member...), err
	}

	// Before the generic config, which reads feature gates.
	effective, err := apiLibraryVersion(o.FeatureGates)
	if err != nil {
		return nil, err
	}
	generic := genericapiserver.NewConfig(codecs)
	generic.EffectiveVersion = effective
	generic.MaxRequestBodyBytes = 3 << 20
	generic.RequestTimeout = o.RequestTimeout
	if err := o.applyServing(generic, listener, certFile, keyFile); err != nil {
		return nil, err
	}
	if err := st.applyTo(generic, scheme, codecs); err != nil {
		return nil, err
	}
	if err := o.applyAudit(generic); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	stores, err := newStores(scheme, generic)
	if err != nil {
		return nil, err
	}
	logs := executionlog.NewStore(st.client)
	watches, err := o.applyAccess(generic, id.ca, stores.getters(), logs)
	if err != nil {
		return nil, err
	}
	applyOpenAPI(generic, scheme)
	replica, err := o.replicaID()
	if err != nil {
		return nil, err
	}
	idempotent := idempotency.NewStore(st.client)
	paths := &pathIndex{}
	beats := &leanBeats{}
	schemas := &applycheck.Schemas{}
	o.applyHandlerChain(generic, scheme, idempotent, watches, projectBirths{st.client}, schemas, paths, beats)

	out := func(format string, args ...interface{}) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, format+"\n", args...)
		}
	}
	join, _ := o.JoinCommand()
	return &Config{
		schemas: schemas, joinCommand: join, replicaID: replica, replicaAddress: o.peerAddress(listener), idempotent: idempotent, leaderLease: o.LeaderElectLeaseDuration, paths: paths, beats: beats,
		Generic: generic, Scheme: scheme, Codecs: codecs, Stores: stores,
		KubeconfigPath: kubeconfig, URL: url, out: out, storage: st, identityCreated: id.created,
		executionLogs: logs, watches: watches,
		liveness: liveness.New(st.client, st.leases, 3*o.HeartbeatInterval), heartbeatInterval: o.HeartbeatInterval,
		agentCertValidity: o.AgentCertificateValidity, ca: id.ca, sshCA: id.sshCA, renew: renew,
	}, nil
}

// apiLibraryVersion is the Kubernetes version the API server emulates: the
// one of the apiserver library Nodus is built with. The build stamps Nodus'
// own version (v0.1.0-…) into component-base's gitVersion, for /version and
// `nodus version`; the library reads that as the Kubernetes version to
// emulate, and at "0.1" it turned off every feature that came after it
// (watch lists among them) in the built binary, while `go test` builds,
// which carry no stamp, ran with the library's defaults. Both now run with
// the library's defaults, but for libraryFeatureDefaults, and then gates,
// the operator's --feature-gates.
func apiLibraryVersion(gates map[string]bool) (basecompatibility.EffectiveVersion, error) {
	v := version.MustParse(baseversion.DefaultKubeBinaryVersion)
	effective := basecompatibility.NewEffectiveVersion(v, false, v.SubtractMinor(3), v.SubtractMinor(3))
	if err := utilfeature.DefaultMutableFeatureGate.SetEmulationVersionAndMinCompatibilityVersion(
		effective.EmulationVersion(), effective.MinCompatibilityVersion()); err != nil {
		return nil, fmt.Errorf("feature gates at Kubernetes %s: %w", v, err)
	}
	set := maps.Clone(libraryFeatureDefaults)
	maps.Copy(set, gates)
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(set); err != nil {
		return nil, fmt.Errorf("--feature-gates: %w", err)
	}
	return effective, nil
}

// libraryFeatureDefaults are the library's feature gates Nodus sets
// otherwise than the library does.
var libraryFeatureDefaults = map[string]bool{
	// With it, each watch cache keeps a copy-on-write snapshot of its tree
	// at every write for as long as it keeps the write's event, so that a
	// LIST at an older resourceVersion (the later pages of a paginated
	// LIST) is served from memory. While 10,000 reserved hosts were
	// created those clones held about 70 MB of the heap, and the server's
	// RSS was a quarter lower without them (docs/performance.md). Without
	// them, such LISTs read etcd, as before Kubernetes 1.34.
	string(features.ListFromCacheSnapshot): false,
}

// applyAccess sets who a request is (the cluster CA's client certificates,
// access tokens, agents), what it may do and the admission plugins; the
// watches it returns end those whose access ended.
func (o *Options) applyAccess(generic *genericapiserver.Config, ca *pki.CA, getters storeGetters, logs *executionlog.Store) (*revocation.Watches, error) {
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)
	caContent, err := dynamiccertificates.NewStaticCAContent("nodus-ca", ca.CertPEM)
	if err != nil {
		return nil, err
	}
	if err := generic.Authentication.ApplyClientCert(caContent, generic.SecureServing); err != nil {
		return nil, err
	}
	generic.Authentication.Authenticator = auth.NewAuthenticator(clientCAs, getters)
	authz := &auth.Authorizer{Projects: getters, Nodes: getters, Tokens: getters}
	generic.Authorization.Authorizer = authz
	projects := projectexists.New()
	projects.Projects = getters
	generic.AdmissionControl = admission.NewChainHandler(resourceversion.NewPlugin(), projects, lendingpolicy.New(getters), nodeclaim.New(getters), noderestriction.New(), nodedeletion.New(), nodeclass.New(),
		executionlimit.New(keptExecutions{logs.Client, logs}, o.MaxExecutionsPerProject))
	return &revocation.Watches{Authorizer: authz, Tokens: getters}, nil
}

// applyOpenAPI publishes the generated OpenAPI v2 and v3 documents.
func applyOpenAPI(generic *genericapiserver.Config, scheme *runtime.Scheme) {
	namer := openapi.NewDefinitionNamer(scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title, generic.OpenAPIConfig.Info.Version = "Nodus", "v1"
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title, generic.OpenAPIV3Config.Info.Version = "Nodus", "v1"
}

// applyHandlerChain wraps the generic chain: Nodus' error envelope (and
// Ironic's error format on /v1) outside, the action contract and watch
// revocation inside, after authentication.
func (o *Options) applyHandlerChain(generic *genericapiserver.Config, scheme *runtime.Scheme, idempotent *idempotency.Store, watches *revocation.Watches,
	births projecthistory.Births, schemas *applycheck.Schemas, paths *pathIndex, beats *leanBeats) {
	docsBase := o.DocsBaseURL
	keysPerCaller := o.IdempotencyKeysPerCaller
	heartbeatInterval := o.HeartbeatInterval
	generic.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		apiHandler = requestnamespace.Filter(applycheck.Filter(projecthistory.Filter(resourceversion.Filter(watches.Filter(actions.WithActions(apiHandler, idempotent, actions.Options{BodyLimits: actionSubresources, KeysPerCaller: keysPerCaller,
			PerProject: func(u user.Info) bool {
				_, _, agent := auth.NodeOf(u)
				return !agent && !slices.Contains(u.GetGroups(), auth.GroupEnrollers)
			}}))), births, auth.IsOperator), schemas, ownKind(scheme), c.MaxRequestBodyBytes))
		// The generic chain's timeout filter runs what it wraps on a new
		// goroutine: grow its stack before the storage and encoding below.
		apiHandler = stackgrow.Handler(apiHandler, func(r *http.Request) bool {
			info, ok := request.RequestInfoFrom(r.Context())
			return ok && c.LongRunningFunc(r, info)
		})
		// Beats the lean path takes are mutating requests the generic
		// chain's in-flight limit does not see: they get a share of it,
		// so that the server's limit stays what it was set to.
		leanSlots, genericSlots := heartbeatpath.LeanShare(c.MaxMutatingRequestsInFlight)
		c.MaxMutatingRequestsInFlight = genericSlots
		// Ironic's discovery is public, as in Ironic: inside the envelope,
		// before authentication.
		chain := ironic.WithDiscovery(genericapiserver.DefaultBuildHandlerChain(apiHandler, c), paths.get)
		// Plain heartbeats skip the generic chain's per-request work; every
		// other request, and every beat the lean path does not take, goes
		// down the chain. Inside the envelope: its errors get the envelope.
		envelopeOpts := envelope.Options{
			DocsBaseURL: docsBase, Resolver: c.RequestInfoResolver, RequestTimeout: c.RequestTimeout,
			Formats: []envelope.Format{{Match: ironic.IsIronicPath, Write: ironic.WriteError}},
		}
		beats.filter = heartbeatpath.New(chain, heartbeatpath.Options{
			Authenticator: c.Authentication.Authenticator, APIAudiences: c.Authentication.APIAudiences,
			Authorizer: c.Authorization.Authorizer, AuditBackend: c.AuditBackend, AuditPolicy: c.AuditPolicyRuleEvaluator,
			Admission: c.AdmissionControl, Scheme: scheme, Serializer: c.Serializer, Timeout: c.RequestTimeout,
			MaxInFlight: leanSlots, WaitGroup: c.NonLongRunningRequestWaitGroup,
			BodyLimit: actionSubresources["nodes/heartbeat"], Interval: heartbeatInterval,
			// A stream's failed beat gets the Status every error response gets.
			Envelope: func(req *http.Request, ex *exchange.Exchange, code int, s metav1.Status, retryAfter int) any {
				return envelope.Complete(req, ex, code, s, retryAfter, envelopeOpts)
			},
		})
		// Before authentication and the audit log: inside the envelope, so
		// that its refusal is answered as every other.
		handler := envelope.WithEnvelope(withRequestBounds(beats.filter), envelopeOpts)
		return stackgrow.Handler(ironic.WithDefaultVersion(ironic.WithAuthToken(handler)), longRunningByURL)
	}
}

// longRunningByURL tells the requests that hold their goroutine for as
// long as they last, before the generic chain resolves them: watches (the
// watch parameter, as the library parses it, or the deprecated /watch/
// path) and heartbeat streams. A request it misses is only grown.
func longRunningByURL(r *http.Request) bool {
	switch {
	case strings.HasSuffix(r.URL.Path, "/"+heartbeatstream.Subresource), strings.Contains(r.URL.Path, "/watch/"):
		return true
	case !strings.Contains(r.URL.RawQuery, "watch="):
		return false
	}
	watch, err := strconv.ParseBool(r.URL.Query().Get("watch"))
	return err == nil && watch
}

// ownKind tells the kinds of the nodus.dev group, those the apply check's
// converter is built for.
func ownKind(scheme *runtime.Scheme) func(schema.GroupVersionKind) bool {
	return func(gvk schema.GroupVersionKind) bool {
		return gvk.Group == nodusv1.GroupName && scheme.Recognizes(gvk)
	}
}

// leanBeats holds the lean heartbeat path, made with the handler chain
// before the storage it serves exists.
type leanBeats struct{ filter *heartbeatpath.Filter }

// pathIndex is the server's listed paths, for the public root document.
type pathIndex struct{ list atomic.Pointer[[]string] }

func (p *pathIndex) get() []string {
	if l := p.list.Load(); l != nil {
		return *l
	}
	return []string{}
}

func (p *pathIndex) set(paths []string) { p.list.Store(&paths) }
