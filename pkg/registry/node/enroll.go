package node

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// AnnotationEnrollmentTokenUID is on a Node an enrollment created or
// raised: the UID of the token whose enrollment gave the node its current
// agent generation (or, at generation 0, created it). An enrollment asked
// again after a lost answer tells by it whether its step was done.
const AnnotationEnrollmentTokenUID = "nodus.dev/enrollment-token-uid"

// DefaultAgentCertificateValidity is how long an agent certificate is
// valid; the agent renews it two thirds into that time.
const DefaultAgentCertificateValidity = 30 * 24 * time.Hour

// EnrollREST serves POST nodes/{name}/enroll, authenticated by an
// enrollment token: it uses the token up, creates the Node (or, for a node
// enrolled before, keeps it), raises its agent generation — which makes
// every older agent credential worthless — and signs the agent's key.
//
// A token enrolls only into its own pool, and only the node it names; a
// token without a node name only a name that no node has yet. Enrollment
// never changes an existing node's spec: pool, class and traits are the
// operator's.
type EnrollREST struct {
	Tokens     *genericregistry.Store // enrollmenttokens/status
	Nodes      *genericregistry.Store // nodes
	NodeStatus *genericregistry.Store // nodes/status
	CA         *pki.CA
	// Validity is the agent certificates' lifetime; default DefaultAgentCertificateValidity.
	Validity time.Duration
}

var _ rest.NamedCreater = &EnrollREST{}

func (e *EnrollREST) New() runtime.Object { return &nodusv1.NodeEnrollment{} }
func (e *EnrollREST) Destroy()            {}

// Create enrolls node name. A token enrolls one agent key once; the agent
// holding that key may ask again for the same node, until the token
// expires, when the answer did not reach it. Each step of an enrollment
// is recorded where the next one can tell it was done — the token's use
// and the node it is bound to on the token, the generation it raises on
// the node with the token's UID beside it — so a request that asks again
// does what is left, and gets the generation that enrollment gave the
// node. Nothing else gets anything from a used token.
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
	key := pki.KeyFingerprint(csr)
	current, err := e.Tokens.Get(ctx, tokenName, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	token := current.(*nodusv1.EnrollmentToken)
	// The caller was authenticated against the watch cache's copy: the
	// token as stored must be that object, and unexpired now.
	if uids := u.GetExtra()[auth.ExtraEnrollmentTokenUID]; len(uids) != 1 || uids[0] != string(token.UID) {
		return nil, apierrors.NewUnauthorized(fmt.Sprintf("enrollment token %q was deleted and made again since this request was authenticated: its secret is the old token's", tokenName))
	}
	if token.Spec.ExpiresAt != nil && !time.Now().Before(token.Spec.ExpiresAt.Time) {
		return nil, apierrors.NewUnauthorized(fmt.Sprintf("enrollment token %q expired at %s", tokenName, token.Spec.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	if token.DeletionTimestamp != nil {
		return nil, deletedToken(tokenName)
	}
	if token.Status.UsedAt != nil {
		if err := usedBySomeoneElse(ctx, token, name, key); err != nil {
			return nil, err
		}
	} else if err := e.check(ctx, token, name); err != nil {
		return nil, err
	}
	if token, err = e.use(ctx, token.Name, name, key); err != nil {
		return nil, err
	}
	if token, err = e.bind(ctx, token, name, req.CleaningOwed); err != nil {
		return nil, err
	}
	n, err := e.raise(ctx, token, name, req.CleaningOwed)
	if err != nil {
		return nil, err
	}
	cert, err := e.CA.SignCSR(csr, AgentSubject(n), validity(e.Validity))
	if err != nil {
		return nil, err
	}
	return &nodusv1.NodeEnrollment{Certificate: string(cert), CA: string(e.CA.CertPEM), AgentGeneration: n.Status.AgentGeneration,
		CleaningOwed: req.CleaningOwed && n.Status.Reservation == "" && lifecycle.OwesCleaning(n)}, nil
}

// check refuses, before an unused token is used up, what it may not
// enroll: the operator may have mistyped a name.
func (e *EnrollREST) check(ctx context.Context, token *nodusv1.EnrollmentToken, name string) error {
	existing, err := e.Nodes.Get(ctx, name, &metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return err
	}
	if err := mayEnroll(ctx, token, name, asNode(existing), ""); err != nil {
		return err
	}
	// So does a node that could not be created (a hostname such as
	// GPU-Node01 is no node name): it is checked as its create will be.
	if existing == nil {
		if errs := validation.ValidateNode(newNode(name, token)); len(errs) > 0 {
			return apierrors.NewInvalid(nodusv1.Kind("Node"), name, errs)
		}
	}
	return nil
}

// use records the token's use by key for node name, in one write: of two
// enrollments with one token, one wins. The agent that used it already
// finds its record unchanged.
func (e *EnrollREST) use(ctx context.Context, tokenName, name, key string) (*nodusv1.EnrollmentToken, error) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	used, _, err := e.Tokens.Update(ctx, tokenName, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			t := old.(*nodusv1.EnrollmentToken).DeepCopy()
			if t.DeletionTimestamp != nil {
				return t, deletedToken(tokenName)
			}
			if t.Status.UsedAt != nil {
				return t, usedBySomeoneElse(ctx, t, name, key)
			}
			t.Status.UsedBy, t.Status.UsedAt, t.Status.AgentKeyFingerprint = name, &now, key
			return t, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return used.(*nodusv1.EnrollmentToken), nil
}

// deletedToken: the token was deleted and a finalizer keeps the object; a
// deletion revokes it, whatever holds it.
func deletedToken(name string) error {
	return apierrors.NewUnauthorized(fmt.Sprintf("enrollment token %q was deleted: it enrolls nothing", name))
}

// bind records on the token the node it enrolls and the generation it
// gives it, once: the node as it is (a token for a node that exists), or
// the one it creates (or created, before an answer was lost, as long as no
// enrollment raised it since). A node created meanwhile by someone else is
// not a token's to take over unless the token names it. A node created for
// an agent whose state owes a cleaning is created being cleaned.
func (e *EnrollREST) bind(ctx context.Context, token *nodusv1.EnrollmentToken, name string, owed bool) (*nodusv1.EnrollmentToken, error) {
	if token.Status.NodeUID != "" {
		return token, nil
	}
	node, createCtx := newNode(name, token), ctx
	if owed {
		// Created being cleaned: a node in enroll may be claimed before
		// its agent's first report.
		cleaned := lifecycle.Handover(node, "", 0, nil, time.Now())
		createCtx = withCreatedStatus(ctx, &cleaned.Status)
	}
	obj, err := e.Nodes.Create(createCtx, node, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		obj, err = e.Nodes.Get(ctx, name, &metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	n := obj.(*nodusv1.Node)
	createdUID := types.UID("")
	if n.Annotations[AnnotationEnrollmentTokenUID] == string(token.UID) && n.Status.AgentGeneration == 0 {
		createdUID = n.UID
	}
	if err := mayEnroll(ctx, token, name, n, createdUID); err != nil {
		return nil, err
	}
	bound, _, err := e.Tokens.Update(ctx, token.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			t := old.(*nodusv1.EnrollmentToken).DeepCopy()
			if t.Status.NodeUID == "" { // else a request of the same agent bound it first
				t.Status.NodeUID, t.Status.AgentGeneration = n.UID, n.Status.AgentGeneration+1
			}
			return t, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return bound.(*nodusv1.EnrollmentToken), nil
}

// raise gives node name the generation the token is bound to, in one
// write with the token's UID beside it (AnnotationEnrollmentTokenUID):
// from the generation before it, or not at all when this token raised it
// already. Anything else means the node was deleted or enrolled again
// since the token was bound to it, and its key gets nothing: a credential
// never comes back. A node nothing holds goes to cleaning when the agent's
// state owes one.
func (e *EnrollREST) raise(ctx context.Context, token *nodusv1.EnrollmentToken, name string, owed bool) (*nodusv1.Node, error) {
	want := token.Status.AgentGeneration
	updated, _, err := e.NodeStatus.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*nodusv1.Node).DeepCopy()
			switch {
			case n.UID != token.Status.NodeUID:
				return nil, tokenUsed(ctx, token, name, fmt.Sprintf("enrollment token %q enrolled node %q, which was deleted and created again since: a credential never comes back", token.Name, name))
			case n.Status.AgentGeneration == want && n.Annotations[AnnotationEnrollmentTokenUID] == string(token.UID):
				return n, nil // raised by this token before its answer was lost
			case n.Status.AgentGeneration != want-1:
				return nil, tokenUsed(ctx, token, name, fmt.Sprintf("enrollment token %q enrolls node %q at agent generation %d; the node was enrolled again since (generation %d): a credential never comes back",
					token.Name, name, want, n.Status.AgentGeneration))
			}
			n.Status.AgentGeneration = want
			// What the retired agent reported goes with it: a copy of its
			// credential (a former tenant with root) may have written the
			// host key and address the next tenant's ssh pins and dials.
			// The new agent reports them again when it starts.
			n.Status.Inventory, n.Status.SSHHostKey, n.Status.SSHAddress, n.Status.ExecutionSlots = nodusv1.NodeInventory{}, "", "", 0
			n.Status.AccessRefusal = nil
			if owed && n.Status.Reservation == "" && n.Status.Allocation == "" && !lifecycle.OwesCleaning(n) {
				// A state an earlier node's tenant is not cleaned after
				// (another machine's enrolled as this node, or one kept
				// through a reinstall): cleaned before anyone claims
				// the node. A held node's holder stays (its agent
				// refuses another reservation until the cleaning after
				// the one that owes it).
				n = lifecycle.Handover(n, "", 0, nil, time.Now())
			}
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[AnnotationEnrollmentTokenUID] = string(token.UID)
			return n, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, tokenUsed(ctx, token, name, fmt.Sprintf("enrollment token %q enrolled node %q, which was deleted since: a credential never comes back", token.Name, name))
	}
	if err != nil {
		return nil, err
	}
	return updated.(*nodusv1.Node), nil
}

// usedBySomeoneElse refuses a used token to all but the agent key it
// enrolled, asking for the node it enrolled.
func usedBySomeoneElse(ctx context.Context, token *nodusv1.EnrollmentToken, name, key string) error {
	used := token.Status.UsedAt.UTC().Format(time.RFC3339)
	switch {
	case token.Status.UsedBy != name:
		return tokenUsed(ctx, token, name, fmt.Sprintf("enrollment token %q was used by node %q at %s; a token enrolls once", token.Name, token.Status.UsedBy, used))
	case token.Status.AgentKeyFingerprint != key:
		return tokenUsed(ctx, token, name, fmt.Sprintf("enrollment token %q enrolled node %q at %s with another agent key; a token enrolls once, and only that key may ask for its answer again", token.Name, name, used))
	}
	return nil
}

func tokenUsed(ctx context.Context, token *nodusv1.EnrollmentToken, name, message string) error {
	return apierror.New(ctx, apierror.ReasonEnrollmentTokenUsed, nodusv1.Resource("nodes"), name, message, "")
}

// newNode is the Node a token enrolls under name when none has it: its
// spec is the token's.
func newNode(name string, token *nodusv1.EnrollmentToken) *nodusv1.Node {
	return &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationEnrollmentTokenUID: string(token.UID)}},
		Spec: nodusv1.NodeSpec{Pool: token.Spec.Pool, ResourceClass: token.Spec.ResourceClass,
			Traits: token.Spec.Traits, LoginUser: token.Spec.LoginUser},
	}
}

// validity is d, or the default where it is unset.
func validity(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultAgentCertificateValidity
}

// AgentSubject is the certificate subject of node n's agent: its user, the
// nodes group, and the two things a credential is bound to — the node's
// current agent generation and the Node object's UID.
func AgentSubject(n *nodusv1.Node) pkix.Name {
	return pkix.Name{
		CommonName:         auth.NodeUserPrefix + n.Name,
		Organization:       []string{auth.GroupNodes},
		OrganizationalUnit: []string{auth.GenerationUnit(n.Status.AgentGeneration), auth.NodeUIDUnit(string(n.UID))},
	}
}

// mayEnroll says whether token may enroll node name, which is existing
// (nil when no node has the name). createdUID is the node this enrollment
// created itself, which any token of its pool may enroll.
func mayEnroll(ctx context.Context, token *nodusv1.EnrollmentToken, name string, existing *nodusv1.Node, createdUID types.UID) error {
	gr := nodusv1.Resource("nodes")
	if token.Spec.NodeName != "" && token.Spec.NodeName != name {
		return apierror.New(ctx, apierror.ReasonEnrollmentTokenNodeMismatch, gr, name,
			fmt.Sprintf("enrollment token %q was issued for node %q, not %q", token.Name, token.Spec.NodeName, name), "")
	}
	if existing == nil || (createdUID != "" && existing.UID == createdUID) {
		return nil
	}
	if token.Spec.NodeName == "" {
		// Before the pool's check, and without the pool: a token that
		// names no node may be a supplier's provisioning system's, which
		// learns from its refusals which names exist, not which pool
		// (another supplier's fleet, perhaps) holds them.
		return apierror.New(ctx, apierror.ReasonNodeAlreadyEnrolled, gr, name,
			fmt.Sprintf("node %q is enrolled already; enrollment token %q names no node, so it enrolls only a new name", name, token.Name), "")
	}
	if existing.Spec.Pool != token.Spec.Pool {
		return apierror.New(ctx, apierror.ReasonEnrollmentTokenPoolMismatch, gr, name,
			fmt.Sprintf("node %q belongs to pool %q; enrollment token %q is for pool %q", name, existing.Spec.Pool, token.Name, token.Spec.Pool), "")
	}
	return nil
}

func asNode(obj runtime.Object) *nodusv1.Node {
	if obj == nil {
		return nil
	}
	return obj.(*nodusv1.Node)
}
