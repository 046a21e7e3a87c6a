package node

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// EnrollREST serves POST nodes/{name}/enroll, authenticated by an
// enrollment token: it uses the token up, creates the Node (or, for a node
// enrolled before, keeps it), raises its agent generation — which makes
// every older agent credential worthless — and signs the agent's key.
type EnrollREST struct {
	Tokens     *genericregistry.Store // enrollmenttokens/status
	Nodes      *genericregistry.Store // nodes
	NodeStatus *genericregistry.Store // nodes/status
	CA         *pki.CA
}

var _ rest.NamedCreater = &EnrollREST{}

func (e *EnrollREST) New() runtime.Object { return &nodusv1.NodeEnrollment{} }
func (e *EnrollREST) Destroy()            {}

// Create enrolls node name.
func (e *EnrollREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*nodusv1.NodeEnrollment)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a NodeEnrollment, got %T", obj))
	}
	if len(options.DryRun) > 0 {
		return nil, apierrors.NewBadRequest("enrollment has no dry run: it uses the token up")
	}
	u, _ := genericapirequest.UserFrom(ctx)
	tokenName := ""
	if u != nil && len(u.GetExtra()[auth.ExtraEnrollmentToken]) == 1 {
		tokenName = u.GetExtra()[auth.ExtraEnrollmentToken][0]
	}
	if tokenName == "" {
		return nil, apierrors.NewForbidden(nodusv1.Resource("nodes"), name, fmt.Errorf("enrollment needs an enrollment token"))
	}
	// Check the request before the token is used up by it.
	csr, err := pki.ParseCSR([]byte(req.CertificateRequest))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	// Use the token up first: of two enrollments with one token, one wins.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	used, _, err := e.Tokens.Update(ctx, tokenName, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			t := old.(*nodusv1.EnrollmentToken).DeepCopy()
			if t.Status.UsedAt != nil {
				return nil, apierrors.NewForbidden(nodusv1.Resource("enrollmenttokens"), tokenName, fmt.Errorf("the token was used by node %s", t.Status.UsedBy))
			}
			t.Status.UsedBy, t.Status.UsedAt = name, &now
			return t, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	token := used.(*nodusv1.EnrollmentToken)

	_, err = e.Nodes.Create(ctx, &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.NodeSpec{Pool: token.Spec.Pool, ResourceClass: token.Spec.ResourceClass,
			Traits: token.Spec.Traits, LoginUser: token.Spec.LoginUser},
	}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	updated, _, err := e.NodeStatus.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*nodusv1.Node).DeepCopy()
			n.Status.AgentGeneration++
			return n, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	generation := updated.(*nodusv1.Node).Status.AgentGeneration
	cert, err := e.CA.SignCSR(csr, pkix.Name{
		CommonName:         auth.NodeUserPrefix + name,
		Organization:       []string{auth.GroupNodes},
		OrganizationalUnit: []string{auth.GenerationUnit(generation)},
	})
	if err != nil {
		return nil, err
	}
	return &nodusv1.NodeEnrollment{Certificate: string(cert), CA: string(e.CA.CertPEM), AgentGeneration: generation}, nil
}
