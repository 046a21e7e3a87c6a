package server

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/scheme"
	"github.com/nodus-dev/nodus/pkg/loopback"
	"github.com/nodus-dev/nodus/pkg/typemeta"
)

// loopbackClientset is the clientset the controllers write with, over the
// loopback (their informers read the stores in process: pkg/localinformers).
// Its requests are served by handler, the server's own handler chain, in
// process (pkg/loopback): the loopback's bearer token still authenticates
// them. It decodes with typemeta's serializer: what it reads comes from this
// server, whose encoder writes kind and apiVersion first, and reading them
// there spares a pass over every answer (docs/performance.md).
func loopbackClientset(config *rest.Config, handler http.Handler) (*versioned.Clientset, error) {
	cfg := rest.CopyConfig(config)
	// client-go takes a transport of its own only without TLS settings,
	// which a call in process has no use for.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = &loopback.Transport{Handler: handler}
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
