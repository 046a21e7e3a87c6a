package server

import (
	"fmt"

	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/scheme"
	"github.com/nodus-dev/nodus/pkg/typemeta"
)

// loopbackClientset is the clientset the controllers write with, over the
// loopback (their informers read the stores in process: pkg/localinformers).
// It decodes with typemeta's serializer: what it reads comes from this
// server, whose encoder writes kind and apiVersion first, and reading them
// there spares a pass over every answer (docs/performance.md).
func loopbackClientset(loopback *rest.Config) (*versioned.Clientset, error) {
	cfg := rest.CopyConfig(loopback)
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
