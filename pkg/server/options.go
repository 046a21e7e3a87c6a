// Package server builds and runs nodus-server: the k8s.io/apiserver generic
// server with the nodus.dev/v1 storages, on embedded or external etcd.
// Options (flags) → Config → CompletedConfig → Server, as sample-apiserver.
package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
)

// EmbeddedEtcd is the --etcd-servers value that runs etcd inside the server.
const EmbeddedEtcd = "embedded"

// Options are nodus-server's flags.
type Options struct {
	DataDir     string
	EtcdServers []string
	// EtcdCAFile, EtcdCertFile and EtcdKeyFile are an external etcd's CA
	// and this server's client credential (kube-apiserver's flags).
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// ClusterKeyFile holds the secret every replica is given; it seals the
	// cluster's signing keys in etcd. Default with embedded etcd: DIR/cluster.key.
	ClusterKeyFile string
	SecurePort     int
	BindAddress    string
	// TLSSANs are extra host names or IPs for the serving certificate.
	TLSSANs     []string
	DocsBaseURL string
	// HeartbeatInterval is how often agents report; a node is not ready
	// after three missed intervals.
	HeartbeatInterval time.Duration
	// AgentCertificateValidity is how long an agent certificate is valid;
	// agents renew theirs two thirds into it.
	AgentCertificateValidity time.Duration
	// MaxExecutionsPerProject bounds the Executions a project keeps stored.
	MaxExecutionsPerProject int
	// EmbeddedEtcdQuotaBytes is the embedded etcd's database size past
	// which it refuses writes (StorageFull) until room is made.
	EmbeddedEtcdQuotaBytes int64
	// IdempotencyKeysPerCaller bounds the answers of Idempotency-Keys one
	// caller keeps stored per project; 0 is actions.DefaultKeysPerCaller.
	IdempotencyKeysPerCaller int
	// AuditLogPath is where audit events go; empty means DIR/audit.log, "-" stdout.
	AuditLogPath string
	// AuditPolicyFile overrides the built-in audit policy.
	AuditPolicyFile string
	// AuditLogMaxSize (MB), AuditLogMaxBackups and AuditLogMaxAge (days)
	// keep the audit log's files, as kube-apiserver's flags of the names.
	AuditLogMaxSize, AuditLogMaxBackups, AuditLogMaxAge int
	// AuditWebhookConfigFile sends audit events to a webhook as well (a
	// kubeconfig naming it): a copy off the machine that no flood of
	// requests here rotates away.
	AuditWebhookConfigFile string

	// LeaderElectLeaseDuration is how long a replica that leads the
	// controllers and dies without a word keeps the lead.
	LeaderElectLeaseDuration time.Duration
	// FeatureGates set the API server library's feature gates, over
	// Nodus' own defaults (libraryFeatureDefaults).
	FeatureGates map[string]bool
	// EtcdProbeTimeout bounds the start-up check that etcd answers
	// (default 15 s): a server whose etcd is down says so and exits.
	EtcdProbeTimeout time.Duration
	// RequestTimeout bounds a request other than a watch (kube-apiserver's
	// --request-timeout; a create, update or action at most 34 s of it).
	RequestTimeout time.Duration

	// Listener, when set, is used instead of binding BindAddress:SecurePort
	// (tests pass a listener on port 0).
	Listener net.Listener
	Out      io.Writer
}

// NewOptions returns the defaults.
func NewOptions(out io.Writer) *Options {
	return &Options{
		DataDir:           defaultDataDir(),
		EtcdServers:       []string{EmbeddedEtcd},
		SecurePort:        8443,
		BindAddress:       "127.0.0.1",
		HeartbeatInterval: 10 * time.Second,
		// Matches node.DefaultAgentCertificateValidity; options do not import the registry.
		AgentCertificateValidity: 30 * 24 * time.Hour,
		MaxExecutionsPerProject:  1000,
		EmbeddedEtcdQuotaBytes:   embeddedetcd.DefaultQuotaBytes,
		EtcdProbeTimeout:         15 * time.Second,
		RequestTimeout:           time.Minute,
		// Matches leader.DefaultLease.
		LeaderElectLeaseDuration: 5 * time.Second,
		// The library's defaults: 100 files of 100 MB, kept a year.
		AuditLogMaxSize: 100, AuditLogMaxBackups: 100, AuditLogMaxAge: 366,
		Out: out,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory for the CA, certificates, admin.kubeconfig and the embedded etcd's data.")
	fs.StringSliceVar(&o.EtcdServers, "etcd-servers", o.EtcdServers, `"embedded" to run etcd in-process under --data-dir, or a comma-separated list of etcd client URLs of an external cluster.`)
	fs.StringVar(&o.EtcdCAFile, "etcd-cafile", o.EtcdCAFile, "CA bundle that verifies an external etcd's serving certificates.")
	fs.StringVar(&o.EtcdCertFile, "etcd-certfile", o.EtcdCertFile, "Client certificate this server presents to an external etcd (with --etcd-keyfile).")
	fs.StringVar(&o.EtcdKeyFile, "etcd-keyfile", o.EtcdKeyFile, "Key of --etcd-certfile.")
	fs.StringVar(&o.ClusterKeyFile, "cluster-key-file", o.ClusterKeyFile, "Secret that every replica of one cluster is given: it seals the cluster's CA and SSH user CA in etcd. Required with an external etcd; default with embedded etcd: DIR/cluster.key, created on first start.")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "HTTPS port of the API.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the API listens on; 0.0.0.0 for all interfaces.")
	fs.StringSliceVar(&o.TLSSANs, "tls-san", o.TLSSANs, "Extra host names or IPs the serving certificate covers.")
	fs.StringVar(&o.DocsBaseURL, "docs-base-url", o.DocsBaseURL, "Base URL of the error docs pages named in error bodies; default: this server's /docs/errors.")
	fs.StringVar(&o.AuditLogPath, "audit-log-path", o.AuditLogPath, `Audit log file; default DIR/audit.log, "-" for standard output.`)
	fs.StringVar(&o.AuditPolicyFile, "audit-policy-file", o.AuditPolicyFile, "Audit policy; default: the built-in policy (deploy/audit-policy.yaml), written to DIR/audit-policy.yaml at each start.")
	fs.IntVar(&o.AuditLogMaxSize, "audit-log-maxsize", o.AuditLogMaxSize, "Size in megabytes at which the audit log file is rotated (0: never rotated, it grows without bound).")
	fs.IntVar(&o.AuditLogMaxBackups, "audit-log-maxbackup", o.AuditLogMaxBackups, "Rotated audit log files kept (0: all).")
	fs.IntVar(&o.AuditLogMaxAge, "audit-log-maxage", o.AuditLogMaxAge, "Days a rotated audit log file is kept (0: no limit by age).")
	fs.StringVar(&o.AuditWebhookConfigFile, "audit-webhook-config-file", o.AuditWebhookConfigFile, "Also send audit events to the webhook this kubeconfig names (a copy off the machine).")
	fs.DurationVar(&o.AgentCertificateValidity, "agent-certificate-validity", o.AgentCertificateValidity, "How long an agent certificate is valid; agents renew theirs two thirds into it (with the same generation).")
	fs.IntVar(&o.MaxExecutionsPerProject, "max-executions-per-project", o.MaxExecutionsPerProject, "How many Executions (running or ended, until deleted) a project may keep.")
	fs.Int64Var(&o.EmbeddedEtcdQuotaBytes, "embedded-etcd-quota-bytes", o.EmbeddedEtcdQuotaBytes, "Database size past which the embedded etcd refuses writes (answered 507 StorageFull) until enough is deleted.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long the replica that runs the controllers keeps the lead after it stopped renewing it (died, partitioned); whole seconds. Shorter: faster failover; longer: fewer handovers when etcd is slow.")
	fs.Var(cliflag.NewMapStringBool(&o.FeatureGates), "feature-gates", "Feature gates of the Kubernetes API server library, as key=true|false pairs separated by commas. Nodus turns ListFromCacheSnapshot off (docs/performance.md says why); ListFromCacheSnapshot=true turns it on.")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", o.HeartbeatInterval, "How often node agents report (1s to 1m); a node is not ready after three missed intervals.")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "How long a request other than a watch may take before the server answers 504 Timeout (a write at most 34 s of it), its body's arrival included.")
}

// Validate reports every invalid flag.
func (o *Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if len(o.EtcdServers) == 0 {
		errs = append(errs, errors.New(`--etcd-servers must be "embedded" or a list of URLs`))
	}
	if !o.embeddedEtcd() {
		for _, s := range o.EtcdServers {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("--etcd-servers: %q is not an http(s) URL", s))
			}
		}
	}
	if o.embeddedEtcd() && (o.EtcdCAFile != "" || o.EtcdCertFile != "" || o.EtcdKeyFile != "") {
		errs = append(errs, errors.New("--etcd-cafile, --etcd-certfile and --etcd-keyfile are for an external etcd; the embedded one makes its own credentials"))
	}
	if (o.EtcdCertFile == "") != (o.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile go together"))
	}
	for flag, path := range map[string]string{"--etcd-cafile": o.EtcdCAFile, "--etcd-certfile": o.EtcdCertFile, "--etcd-keyfile": o.EtcdKeyFile} {
		if path != "" {
			if _, err := os.Stat(path); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", flag, err))
			}
		}
	}
	// Every gate the library has, at any version: the gates known at the
	// version the process emulates would depend on when this runs (before
	// apiLibraryVersion sets it, the build stamp's "0.1" has none).
	known := utilfeature.DefaultMutableFeatureGate.GetAllVersioned()
	for name := range o.FeatureGates {
		if _, ok := known[featuregate.Feature(name)]; !ok {
			errs = append(errs, fmt.Errorf("--feature-gates: %s is not a feature gate of the API server library", name))
		}
	}
	if !o.embeddedEtcd() && o.ClusterKeyFile == "" {
		errs = append(errs, errors.New("--cluster-key-file is required with an external etcd: every replica of the cluster is given the same one (see docs/ha.md)"))
	}
	if o.Listener == nil && (o.SecurePort < 1 || o.SecurePort > 65535) {
		errs = append(errs, fmt.Errorf("--secure-port %d is not a port", o.SecurePort))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", o.BindAddress))
	}
	for i, san := range o.TLSSANs {
		// DNS names are compared without case, and a certificate names
		// them without the root's dot.
		name := strings.ToLower(strings.TrimSuffix(san, "."))
		if net.ParseIP(san) == nil && len(utilvalidation.IsDNS1123Subdomain(name)) > 0 && len(utilvalidation.IsWildcardDNS1123Subdomain(name)) > 0 {
			errs = append(errs, fmt.Errorf("--tls-san %q is neither an IP address nor a DNS name (give the host alone: no scheme, port or path)", san))
			continue
		}
		if net.ParseIP(san) == nil {
			o.TLSSANs[i] = name
		}
	}
	if o.HeartbeatInterval < time.Second {
		errs = append(errs, fmt.Errorf("--heartbeat-interval %s is below one second", o.HeartbeatInterval))
	}
	if most := nodusv1.MaxHeartbeatIntervalSeconds * time.Second; o.HeartbeatInterval > most {
		errs = append(errs, fmt.Errorf("--heartbeat-interval %s is above %s: agents beat at most that far apart (each beat also ends what is left of an access that ended)", o.HeartbeatInterval, most))
	}
	if o.AgentCertificateValidity < 10*time.Second {
		errs = append(errs, fmt.Errorf("--agent-certificate-validity %s is below 10 seconds", o.AgentCertificateValidity))
	}
	if o.RequestTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--request-timeout %s is below one second", o.RequestTimeout))
	}
	if o.LeaderElectLeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration %s is below one second", o.LeaderElectLeaseDuration))
	}
	if o.MaxExecutionsPerProject < 1 {
		errs = append(errs, fmt.Errorf("--max-executions-per-project %d must be at least 1", o.MaxExecutionsPerProject))
	}
	if o.EmbeddedEtcdQuotaBytes < minEmbeddedEtcdQuota {
		errs = append(errs, fmt.Errorf("--embedded-etcd-quota-bytes %d is below %d (32 MiB)", o.EmbeddedEtcdQuotaBytes, minEmbeddedEtcdQuota))
	}
	if o.DocsBaseURL != "" {
		if u, err := url.Parse(o.DocsBaseURL); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--docs-base-url %q is not an absolute URL", o.DocsBaseURL))
		}
	}
	return errors.Join(errs...)
}

// minEmbeddedEtcdQuota leaves room for what a fresh server stores and a
// few objects more.
const minEmbeddedEtcdQuota = 32 << 20

func (o *Options) embeddedEtcd() bool {
	return len(o.EtcdServers) == 1 && o.EtcdServers[0] == EmbeddedEtcd
}

// clientHost is the address clients use to reach a server bound to BindAddress.
func (o *Options) clientHost() string {
	if ip := net.ParseIP(o.BindAddress); ip == nil || ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return o.BindAddress
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "nodus")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "nodus")
	}
	return "nodus-data"
}
