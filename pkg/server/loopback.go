package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/scheme"
	"github.com/nodus-dev/nodus/pkg/typemeta"
)

// informerStreamBuffer is how much of one response the in-process
// informers' HTTP/2 connection takes in ahead of the reader. The Go
// client's default is 4 MiB per stream: while the informers decode their
// first watch lists after a restart, slower than the server encodes them,
// those buffers held 11–17 MB of the restarted server's live heap
// (docs/performance.md). Over the loopback a window this size still keeps
// the server writing while the informer decodes.
const informerStreamBuffer = 256 << 10

// informerClientConfig is the loopback config for the clients whose
// informers watch whole collections (the controllers and the revocation):
// the same server, credentials and TLS, through a transport that buffers at
// most informerStreamBuffer of each response.
func informerClientConfig(loopback *rest.Config) (*rest.Config, error) {
	tlsConfig, err := rest.TLSConfigFor(loopback)
	if err != nil {
		return nil, fmt.Errorf("loopback TLS: %w", err)
	}
	proxy := http.ProxyFromEnvironment
	if loopback.Proxy != nil {
		proxy = loopback.Proxy
	}
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if loopback.Dial != nil {
		dial = loopback.Dial
	}
	transport := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		DialContext:         dial,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		DisableCompression:  loopback.DisableCompression,
		HTTP2:               &http.HTTP2Config{MaxReceiveBufferPerStream: informerStreamBuffer},
	})
	cfg := rest.CopyConfig(loopback)
	// client-go refuses TLS options next to a transport of one's own: they
	// are in the transport.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Proxy, cfg.Dial = nil, nil
	cfg.Transport = transport
	return cfg, nil
}

// informerClientset is the clientset of the controllers and the revocation,
// over informerClientConfig. It decodes with typemeta's serializer: what it
// reads comes from this server, whose encoder writes kind and apiVersion
// first, and reading them there spares a pass over every watch event
// (docs/performance.md).
func informerClientset(loopback *rest.Config) (*versioned.Clientset, error) {
	cfg, err := informerClientConfig(loopback)
	if err != nil {
		return nil, err
	}
	gv := nodusv1.SchemeGroupVersion
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = typemeta.NegotiatedSerializer(scheme.Scheme)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("loopback client: %w", err)
	}
	return versioned.New(client), nil
}
