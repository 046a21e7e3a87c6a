package node

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// RenewREST serves POST nodes/{name}/renew: the node's current agent
// certifies its key again before its certificate expires. The new
// certificate is of the same generation and Node object, so renewal never
// brings back a credential that enrollment or deletion retired.
type RenewREST struct {
	Nodes    *genericregistry.Store // nodes, read from etcd
	CA       *pki.CA
	Validity time.Duration
}

var _ rest.NamedCreater = &RenewREST{}

func (r *RenewREST) New() runtime.Object { return &nodusv1.NodeEnrollment{} }
func (r *RenewREST) Destroy()            {}

// Create renews node name's agent certificate.
func (r *RenewREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*nodusv1.NodeEnrollment)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a NodeEnrollment, got %T", obj))
	}
	u, _ := genericapirequest.UserFrom(ctx)
	node, generation, isAgent := auth.NodeOf(u)
	if !isAgent || node != name {
		return nil, apierrors.NewForbidden(nodusv1.Resource("nodes"), name, fmt.Errorf("only node %s's own agent renews its certificate", name))
	}
	csr, err := pki.ParseCSR([]byte(req.CertificateRequest))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	// The authorizer read the node from a cache; the certificate is signed
	// only against what etcd holds now.
	obj, err = r.Nodes.Get(ctx, name, &metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	// A node deleted since the authorizer's read retired the credential as a
	// re-enrollment does: the agent is told so, not "not found".
	n, _ := obj.(*nodusv1.Node)
	if auth.AgentRetired(u, n) != "" {
		return nil, apierror.New(ctx, apierror.ReasonAgentCredentialRetired, nodusv1.Resource("nodes"), name,
			fmt.Sprintf("this credential of node %s was retired (enrolled again or deleted); it cannot be renewed", name), "")
	}
	if len(options.DryRun) > 0 {
		return &nodusv1.NodeEnrollment{AgentGeneration: generation}, nil
	}
	cert, err := r.CA.SignCSR(csr, AgentSubject(n), validity(r.Validity))
	if err != nil {
		return nil, err
	}
	return &nodusv1.NodeEnrollment{Certificate: string(cert), CA: string(r.CA.CertPEM), AgentGeneration: generation}, nil
}
