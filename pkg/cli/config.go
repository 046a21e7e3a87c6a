// Package cli is the nodus command: customers' and operators' verbs over the
// generated client. Each verb has an options struct with Complete, Validate
// and Run, and writes to injected streams.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodus-dev/nodus/pkg/answerbound"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/failover"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// Streams are a command's input and outputs.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Globals are the flags every command has.
type Globals struct {
	// Kubeconfig overrides $NODUS_CONFIG and ~/.config/nodus/config.
	Kubeconfig string
	Context    string
	Output     string
}

// ConfigPath is where nodus keeps its kubeconfig.
func (g *Globals) ConfigPath() string {
	if g.Kubeconfig != "" {
		return g.Kubeconfig
	}
	if p := os.Getenv("NODUS_CONFIG"); p != "" {
		return p
	}
	return filepath.Join(configHome(), "nodus", "config")
}

// DataDir holds nodus' SSH files.
func DataDir() string { return filepath.Join(configHome(), "nodus") }

// configHome is XDG_CONFIG_HOME, else ~/.config. A relative path is none
// (the XDG spec says to ignore it): nodus' files, its SSH key among them,
// would land wherever the command runs.
func configHome() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return d
	}
	return filepath.Join(homeDir(), ".config")
}

// homeDir is $HOME where it is absolute, else the account's home.
func homeDir() string {
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		return home
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir
	}
	// No home at all (no HOME, no account entry): the conventional
	// "no home" path, never the working directory.
	return "/nonexistent"
}

// RESTConfig loads the client configuration of the current (or chosen) context.
func (g *Globals) RESTConfig() (*rest.Config, error) {
	path := g.ConfigPath()
	if _, err := os.Stat(path); err != nil {
		return nil, usageError(fmt.Errorf("no nodus configuration at %s: run `nodus login --server URL` first (it asks for your access token)", path))
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: g.Context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, usageError(err)
	}
	cfg.UserAgent = "nodus/" + Version
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, usageError(err)
	}
	servers, err := contextServers(&raw, g.Context)
	if err != nil {
		return nil, usageError(fmt.Errorf("%s: %w", path, err))
	}
	// Innermost: what the wrappers below see is the replica that answered.
	cfg.Wrap(failover.Wrap(servers))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return refuseRedirects{rt} })
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return keepErrorBodies{contextHeaders{rt}} })
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedAnswers{rt} })
	return cfg, nil
}

// replicas are the servers of the chosen context: its server, or those
// `nodus login --server A,B,…` stored.
func (g *Globals) replicas() ([]string, error) {
	path := g.ConfigPath()
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: g.Context}).RawConfig()
	if err != nil {
		return nil, usageError(err)
	}
	servers, err := contextServers(&raw, g.Context)
	if err != nil {
		return nil, usageError(fmt.Errorf("%s: %w", path, err))
	}
	return servers, nil
}

// maxAnswerBytes bounds an answer the CLI reads whole: a list of every
// host of a large fleet is a few tens of MiB of JSON. A server that sends
// more (a hostile one, or a fault) gets an error, not the laptop's memory.
var maxAnswerBytes int64 = 256 << 20

// maxWatchEventBytes bounds one event of a watch, which the CLI reads as
// it comes for as long as the server keeps it open, so it is bounded event
// by event, not as a whole: a nodus-server stores no object over etcd's
// request bound (1.5 MiB). An event is counted from the end of the one
// before, the whitespace between them included: client-go's decoder holds
// all of it until the event's JSON value ends, whatever lines it spans.
// A longer event is a hostile server or a fault.
var maxWatchEventBytes int64 = 16 << 20

// boundedAnswers cuts an answer past maxAnswerBytes, and a watch at an
// event past maxWatchEventBytes (the bounds as they are when it is used).
type boundedAnswers struct{ next http.RoundTripper }

func (t boundedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	return answerbound.Transport{Next: t.next, Answer: maxAnswerBytes, WatchEvent: maxWatchEventBytes,
		Refuse: func(e *answerbound.TooLargeError) error { return refuse(reasonAnswerTooLarge, e) },
	}.RoundTrip(req)
}

// withOneAnswersBound has the answers read under ctx, one after the other,
// share the bound of one answer: a listing made of many (each project's
// hosts in turn) holds them all, and a server chooses how many there are.
func withOneAnswersBound(ctx context.Context) context.Context {
	return answerbound.WithOneBound(ctx, maxAnswerBytes)
}

// clientWatchDecoding is the cause client-go gives the error event it makes
// of a watch's stream it cannot read (k8s.io/client-go/rest: a decoding
// error, or boundedEvents' refusal).
const clientWatchDecoding metav1.CauseType = "ClientWatchDecoding"

// watchError is the error a watch's error event st stands for: the
// server's, or, for one client-go made of an event it could not read,
// nodus' own refusal of the answer (past the bound, or not JSON).
func watchError(st *metav1.Status) error {
	if st.Details != nil {
		for _, cause := range st.Details.Causes {
			if cause.Type != clientWatchDecoding {
				continue
			}
			if strings.Contains(cause.Message, answerbound.WatchEventTooLargeText) {
				return refuseWithFix(reasonAnswerTooLarge, errors.New(oneLine(cause.Message)),
					"A nodus-server sends no event this large: tell your operator, with this message.")
			}
			return refuse(reasonAnswerRefused, errors.New(oneLine(cause.Message)))
		}
	}
	return apierrors.FromObject(st)
}

// refuseRedirects turns a redirect into an error before the HTTP client
// follows it: the client would send the user's token to the address it
// names (in clear text, for an http one) and take that answer for the
// server's. A nodus-server never redirects an API request.
type refuseRedirects struct{ http.RoundTripper }

func (r refuseRedirects) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.RoundTripper.RoundTrip(req)
	if err != nil || resp.StatusCode < 300 || resp.StatusCode > 399 || resp.StatusCode == http.StatusNotModified {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, refuse(reasonRedirectRefused, fmt.Errorf("the server answered with a redirect (%d) to %s: nodus follows none, as it would send your credentials there",
		resp.StatusCode, oneLine(resp.Header.Get("Location"))))
}

// Client is the typed client of the current context.
func (g *Globals) Client() (versioned.Interface, *rest.Config, error) {
	cfg, err := g.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := versioned.NewForConfig(cfg)
	return c, cfg, err
}

// serversExtension names the cluster extension that lists a cluster's
// replicas beyond its server.
const serversExtension = "nodus.dev/servers"

type serverList struct {
	Servers []string `json:"servers"`
}

// contextServers are the replicas of the context's cluster: its server,
// or those `nodus login --server A,B,…` stored.
func contextServers(cfg *clientcmdapi.Config, context string) ([]string, error) {
	if context == "" {
		context = cfg.CurrentContext
	}
	c, ok := cfg.Contexts[context]
	if !ok {
		return nil, nil
	}
	cluster, ok := cfg.Clusters[c.Cluster]
	if !ok {
		return nil, nil
	}
	ext, ok := cluster.Extensions[serversExtension]
	if !ok {
		return []string{cluster.Server}, nil
	}
	unknown, ok := ext.(*runtime.Unknown)
	if !ok {
		return nil, fmt.Errorf("the %s extension of cluster %s is not a list of servers", serversExtension, oneLine(c.Cluster))
	}
	var list serverList
	if err := json.Unmarshal(unknown.Raw, &list); err != nil {
		return nil, fmt.Errorf("the %s extension of cluster %s: %s", serversExtension, oneLine(c.Cluster), oneLine(err))
	}
	return failover.Servers(strings.Join(list.Servers, ","))
}

// withServers records servers on cluster: the first as its server, all
// in the extension when there are several.
func withServers(cluster *clientcmdapi.Cluster, servers []string) error {
	cluster.Server = servers[0]
	delete(cluster.Extensions, serversExtension)
	if len(servers) < 2 {
		return nil
	}
	raw, err := json.Marshal(serverList{Servers: servers})
	if err != nil {
		return err
	}
	if cluster.Extensions == nil {
		cluster.Extensions = map[string]runtime.Object{}
	}
	cluster.Extensions[serversExtension] = &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
	return nil
}

// loadConfig reads nodus' kubeconfig, or an empty one.
func loadConfig(path string) (*clientcmdapi.Config, error) {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return clientcmdapi.NewConfig(), nil
	}
	return clientcmd.LoadFromFile(path)
}

// updateConfig changes nodus' kubeconfig at path. It holds a lock on the
// file's directory meanwhile, so that commands at once (a script logging in
// to several servers) each change what the one before wrote, and it writes
// through a rename, so that a command reading the file meanwhile finds it
// whole. A link stays a link: the file it points to is replaced.
func updateConfig(path string, change func(*clientcmdapi.Config) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	if err := change(cfg); err != nil {
		return err
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	target := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	}
	return atomicfile.Write(target, data, 0o600)
}

// lockDir takes an exclusive lock on dir; the function returned lets it go.
// A lock on the directory leaves no file beside the user's (kubectl itself
// creates and removes CONFIG.lock, and would find one of ours in its way).
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// clientFor splits PROJECT/NAME and returns a client for it.
func (g *Globals) clientFor(ref string) (versioned.Interface, string, string, error) {
	project, name, err := splitRef(ref)
	if err != nil {
		return nil, "", "", err
	}
	c, _, err := g.Client()
	return c, project, name, err
}

// host reads PROJECT/NAME, returning the client it used.
func (g *Globals) host(ctx context.Context, ref string) (versioned.Interface, *nodusv1.ReservedHost, error) {
	c, project, name, err := g.clientFor(ref)
	if err != nil {
		return nil, nil, err
	}
	h, err := c.NodusV1().ReservedHosts(project).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return c, h, err
	}
	// What nodus does next (release, lend, ssh) names the host it got:
	// it must be the one asked for.
	if h.Namespace != project || h.Name != name {
		return nil, nil, refuse(reasonAnswerRefused, fmt.Errorf("refusing %s: the server answered for %s", ref, oneLine(h.Namespace+"/"+h.Name)))
	}
	return c, h, nil
}
