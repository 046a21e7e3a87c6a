package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/util/compatibility"

	"github.com/nodus-dev/nodus/deploy"
	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/admission/executionlimit"
	"github.com/nodus-dev/nodus/pkg/admission/lendingpolicy"
	"github.com/nodus-dev/nodus/pkg/admission/nodeclaim"
	"github.com/nodus-dev/nodus/pkg/admission/noderestriction"
	"github.com/nodus-dev/nodus/pkg/admission/projectexists"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/ironic"
	"github.com/nodus-dev/nodus/pkg/liveness"
	"github.com/nodus-dev/nodus/pkg/pki"
	"github.com/nodus-dev/nodus/pkg/registry/accesstoken"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/enrollmenttoken"
	"github.com/nodus-dev/nodus/pkg/registry/execution"
	"github.com/nodus-dev/nodus/pkg/registry/hostlending"
	"github.com/nodus-dev/nodus/pkg/registry/node"
	"github.com/nodus-dev/nodus/pkg/registry/pool"
	"github.com/nodus-dev/nodus/pkg/registry/project"
	"github.com/nodus-dev/nodus/pkg/registry/reservation"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
	"github.com/nodus-dev/nodus/pkg/revocation"
	"github.com/nodus-dev/nodus/pkg/sshca"
)

const (
	etcdPrefix       = "/registry" // keys are /registry/nodus.dev/<resource>/[<namespace>/]<name>
	etcdReadyTimeout = time.Minute
)

// Config is everything New needs, with storage already reachable.
type Config struct {
	Generic        *genericapiserver.Config
	Scheme         *runtime.Scheme
	Codecs         serializer.CodecFactory
	Serializer     runtime.NegotiatedSerializer
	Stores         map[string]base.Stores
	KubeconfigPath string
	URL            string

	out        func(format string, args ...interface{})
	etcd       *embeddedetcd.Server
	etcdClient *clientv3.Client
	// executionLogs keeps the bounded output of executions.
	executionLogs *executionlog.Store

	liveness          *liveness.Tracker
	heartbeatInterval time.Duration
	agentCertValidity time.Duration
	watches           *revocation.Watches
	ca                *pki.CA
	sshCA             *sshca.CA
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

// Config prepares the data directory, the PKI and admin.kubeconfig, starts
// embedded etcd when asked to, and builds the generic server's configuration.
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
	codecs, negotiated := newCodecs(scheme)

	listener := o.Listener
	if listener == nil {
		addr := net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort))
		if listener, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w (choose another --secure-port or --bind-address)", addr, err)
		}
	}
	defer func() {
		if err != nil {
			listener.Close()
		}
	}()
	port := listener.Addr().(*net.TCPAddr).Port
	url := "https://" + net.JoinHostPort(o.clientHost(), strconv.Itoa(port))

	// PKI: the CA signs the serving certificate and every client certificate.
	pkiDir := filepath.Join(o.DataDir, "pki")
	ca, err := pki.LoadOrCreateCA(pkiDir, "nodus-ca")
	if err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	hosts := append([]string{"localhost", "127.0.0.1", "::1", o.clientHost()}, o.TLSSANs...)
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	certFile, keyFile, err := ca.LoadOrCreateServing(pkiDir, "serving", hosts)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	admin, err := ca.LoadOrCreateClient(pkiDir, "admin", auth.AdminUser, []string{auth.GroupOperators})
	if err != nil {
		return nil, fmt.Errorf("admin credential: %w", err)
	}
	sshCA, err := sshca.LoadOrCreate(filepath.Join(pkiDir, "ssh-user-ca"))
	if err != nil {
		return nil, fmt.Errorf("SSH user CA: %w", err)
	}
	kubeconfig := filepath.Join(o.DataDir, "admin.kubeconfig")
	if err := writeKubeconfig(kubeconfig, url, ca.CertPEM, admin); err != nil {
		return nil, fmt.Errorf("write %s: %w", kubeconfig, err)
	}

	generic := genericapiserver.NewConfig(codecs)
	generic.Serializer = negotiated
	generic.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	generic.MaxRequestBodyBytes = 3 << 20

	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.Listener = listener
	serving.BindAddress = net.ParseIP(o.BindAddress)
	serving.BindPort = port
	serving.ServerCert.CertKey = genericoptions.CertKey{CertFile: certFile, KeyFile: keyFile}
	if err := serving.ApplyTo(&generic.SecureServing, &generic.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}

	servers := o.EtcdServers
	var etcd *embeddedetcd.Server
	if o.embeddedEtcd() {
		if etcd, err = embeddedetcd.Start(filepath.Join(o.DataDir, "etcd"), etcdReadyTimeout); err != nil {
			return nil, err
		}
		servers = []string{etcd.ClientURL}
		defer func() {
			if err != nil {
				etcd.Stop(context.Background())
			}
		}()
	}
	etcdOpts := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(etcdPrefix, codecs.LegacyCodec(nodusv1.SchemeGroupVersion)))
	etcdOpts.StorageConfig.Transport.ServerList = servers
	var etcdTLS *tls.Config
	if etcd != nil && etcd.TLS != nil {
		t := &etcdOpts.StorageConfig.Transport
		t.CertFile, t.KeyFile, t.TrustedCAFile = etcd.TLS.CertFile, etcd.TLS.KeyFile, etcd.TLS.CAFile
		if etcdTLS, err = etcd.TLS.Config(); err != nil {
			return nil, fmt.Errorf("embedded etcd client credential: %w", err)
		}
	}
	etcdOpts.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(nodusv1.SchemeGroupVersion,
		schema.GroupKind{Group: nodusv1.GroupName})
	if err := etcdOpts.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}

	if err := o.applyAudit(generic); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}

	stores, err := newStores(scheme, generic)
	if err != nil {
		return nil, err
	}
	getters := storeGetters{projects: stores["projects"].Main, tokens: stores["accesstokens"].Main,
		enrollments: stores["enrollmenttokens"].Main, nodes: stores["nodes"].Main, pools: stores["pools"].Main,
		reservations: stores["reservations"].Main, executions: stores["executions"].Main}

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
	authz := &auth.Authorizer{Projects: getters, Nodes: getters}
	generic.Authorization.Authorizer = authz
	watches := &revocation.Watches{Authorizer: authz, Tokens: getters}
	projects := projectexists.New()
	projects.Projects = getters
	generic.AdmissionControl = admission.NewChainHandler(projects, lendingpolicy.New(getters), nodeclaim.New(getters), noderestriction.New(),
		executionlimit.New(getters, o.MaxExecutionsPerProject))

	namer := openapi.NewDefinitionNamer(scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title, generic.OpenAPIConfig.Info.Version = "Nodus", "v1"
	generic.OpenAPIConfig.PostProcessSpec = withoutProtobufV2
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title, generic.OpenAPIV3Config.Info.Version = "Nodus", "v1"
	generic.OpenAPIV3Config.PostProcessSpec = withoutProtobufV3

	etcdClient, err := clientv3.New(clientv3.Config{Endpoints: servers, TLS: etcdTLS, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	defer func() {
		if err != nil {
			etcdClient.Close()
		}
	}()
	idempotent := idempotency.NewStore(etcdClient)
	alive := liveness.New(etcdClient, 3*o.HeartbeatInterval)
	docsBase := o.DocsBaseURL
	generic.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		apiHandler = watches.Filter(actions.WithActions(apiHandler, idempotent, actions.Options{BodyLimits: actionSubresources, KeysPerCaller: o.IdempotencyKeysPerCaller}))
		handler := envelope.WithEnvelope(genericapiserver.DefaultBuildHandlerChain(apiHandler, c), envelope.Options{
			DocsBaseURL: docsBase, Resolver: c.RequestInfoResolver,
			Formats: []envelope.Format{{Match: ironic.IsIronicPath, Write: ironic.WriteError}},
		})
		return ironic.WithAuthToken(handler)
	}

	out := func(format string, args ...interface{}) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, format+"\n", args...)
		}
	}
	return &Config{
		Generic: generic, Scheme: scheme, Codecs: codecs, Serializer: negotiated, Stores: stores,
		KubeconfigPath: kubeconfig, URL: url, out: out, etcd: etcd, etcdClient: etcdClient,
		executionLogs: executionlog.NewStore(etcdClient), watches: watches,
		liveness: alive, heartbeatInterval: o.HeartbeatInterval, agentCertValidity: o.AgentCertificateValidity, ca: ca, sshCA: sshCA,
	}, nil
}

func newStores(scheme *runtime.Scheme, generic *genericapiserver.Config) (map[string]base.Stores, error) {
	kinds := map[string]base.Kind{
		"projects":         project.Kind(),
		"pools":            pool.Kind(),
		"nodes":            node.Kind(),
		"allocations":      allocation.Kind(),
		"reservations":     reservation.Kind(),
		"reservedhosts":    reservedhost.Kind(),
		"accesstokens":     accesstoken.Kind(),
		"enrollmenttokens": enrollmenttoken.Kind(),
		"executions":       execution.Kind(),
		"hostlendings":     hostlending.Kind(),
	}
	stores := make(map[string]base.Stores, len(kinds))
	for resource, kind := range kinds {
		s, err := base.NewStore(scheme, generic.RESTOptionsGetter, kind)
		if err != nil {
			return nil, fmt.Errorf("storage for %s: %w", resource, err)
		}
		stores[resource] = s
	}
	return stores, nil
}

// storeGetters read Projects, AccessTokens, EnrollmentTokens, Nodes, Pools
// and Reservations for authentication, authorization and admission straight
// from the stores.
type storeGetters struct {
	projects, tokens, enrollments, nodes, pools, reservations, executions *genericregistry.Store
}

// CountExecutions counts a project's Executions in the watch cache.
func (g storeGetters) CountExecutions(ctx context.Context, project string) (int, error) {
	obj, err := g.executions.List(genericapirequest.WithNamespace(ctx, project), &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, err
	}
	return len(obj.(*nodusv1.ExecutionList).Items), nil
}

// GetReservation reads from the watch cache or, when fresh, from etcd.
func (g storeGetters) GetReservation(ctx context.Context, name string, fresh bool) (*nodusv1.Reservation, error) {
	obj, err := g.reservations.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Reservation), nil
}

// GetPool reads from the watch cache.
func (g storeGetters) GetPool(ctx context.Context, name string) (*nodusv1.Pool, error) {
	obj, err := g.pools.Get(ctx, name, fromCache)
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Pool), nil
}

// GetEnrollmentToken reads consistently: a token is used once.
func (g storeGetters) GetEnrollmentToken(ctx context.Context, name string) (*nodusv1.EnrollmentToken, error) {
	obj, err := g.enrollments.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.EnrollmentToken), nil
}

// GetNode reads from the watch cache (a re-enrollment reaches it within
// milliseconds) or, when fresh, from etcd.
func (g storeGetters) GetNode(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error) {
	obj, err := g.nodes.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Node), nil
}

// fromCache asks the watch cache: fresh to within milliseconds, no etcd round trip.
var fromCache = &metav1.GetOptions{ResourceVersion: "0"}

// readOptions reads from the watch cache, or from etcd when fresh.
func readOptions(fresh bool) *metav1.GetOptions {
	if fresh {
		return &metav1.GetOptions{}
	}
	return fromCache
}

// GetProject reads from the watch cache or, when fresh, from etcd.
func (g storeGetters) GetProject(ctx context.Context, name string, fresh bool) (*nodusv1.Project, error) {
	obj, err := g.projects.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Project), nil
}

func (g storeGetters) GetAccessToken(ctx context.Context, name string, fresh bool) (*nodusv1.AccessToken, error) {
	obj, err := g.tokens.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.AccessToken), nil
}

// applyAudit configures the audit log backend with the policy.
func (o *Options) applyAudit(generic *genericapiserver.Config) error {
	audit := genericoptions.NewAuditOptions()
	audit.LogOptions.Path = o.AuditLogPath
	if audit.LogOptions.Path == "" {
		audit.LogOptions.Path = filepath.Join(o.DataDir, "audit.log")
	}
	audit.LogOptions.Format = "json"
	audit.PolicyFile = o.AuditPolicyFile
	if audit.PolicyFile == "" {
		audit.PolicyFile = filepath.Join(o.DataDir, "audit-policy.yaml")
		if err := atomicfile.Write(audit.PolicyFile, deploy.AuditPolicy, 0o644); err != nil {
			return err
		}
	}
	if errs := audit.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	return audit.ApplyTo(generic)
}
