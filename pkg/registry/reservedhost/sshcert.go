package reservedhost

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
	"github.com/nodus-dev/nodus/pkg/sshca"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
)

// MaxCertificateLifetime bounds SSH certificates; endsAt bounds them too.
const MaxCertificateLifetime = time.Hour

// SSHCertificateREST serves POST reservedhosts/{name}/ssh-certificate: a
// project member's public key certified for the reservation's current epoch.
type SSHCertificateREST struct {
	Reservations *genericregistry.Store
	Nodes        *genericregistry.Store
	// Projects reads the caller's project as stored, after the reservation:
	// see stillMay.
	Projects auth.ProjectGetter
	// Tokens reads the caller's AccessToken as stored: a certificate ends
	// when the token it was asked with does.
	Tokens auth.TokenGetter
	CA     *sshca.CA
}

var _ rest.NamedCreater = &SSHCertificateREST{}

func (r *SSHCertificateREST) New() runtime.Object { return &nodusv1.ReservedHostSSHCertificate{} }
func (r *SSHCertificateREST) Destroy()            {}

// stillMay refuses a caller who is no longer a member of the project as
// stored now. The request was authorized from a cache: a member removed a
// moment before may still pass it, and the reservation read after the
// removal's epoch rise would give them a certificate of the new epoch.
// Read after the reservation, the project shows any removal that rise
// answered.
//
// A project being deleted gives nobody a certificate: its reservations are
// being retired (at once, or once a controller leads again), and a
// certificate issued meanwhile would let its holder in until then.
func (r *SSHCertificateREST) stillMay(ctx context.Context, project, name string) error {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil
	}
	p, err := r.Projects.GetProject(ctx, project, true)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil && p.DeletionTimestamp != nil {
		return apierrors.NewForbidden(nodusv1.Resource("reservedhosts"), name, fmt.Errorf("project %q is being deleted: its hosts give no more access", project))
	}
	if auth.IsOperator(u) {
		return nil
	}
	if err == nil {
		if role, ok := auth.RoleIn(p, u); ok && auth.Allows(role, nodusv1.ProjectRoleMember) {
			return nil
		}
	}
	return apierrors.NewForbidden(nodusv1.Resource("reservedhosts"), name,
		fmt.Errorf("user %q is no longer a member of project %q who may connect", u.GetName(), project))
}

// tokenEnds is when the AccessToken the caller authenticated with expires,
// read as stored (nil for a token without expiry, or a caller without a
// token: an operator's certificate). A certificate outliving the token
// would let its holder in after the token's end, which is the end of their
// access. A token gone, being deleted, or made again under its name (its
// UID differs) since authentication gives none.
func (r *SSHCertificateREST) tokenEnds(ctx context.Context, name string) (*time.Time, error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || r.Tokens == nil {
		return nil, nil
	}
	token, uid, ok := auth.AccessTokenOf(u)
	if !ok {
		return nil, nil
	}
	t, err := r.Tokens.GetAccessToken(ctx, token, true)
	if apierrors.IsNotFound(err) || (err == nil && (t.DeletionTimestamp != nil || string(t.UID) != uid)) {
		return nil, apierrors.NewUnauthorized("the access token this request was made with was revoked")
	}
	if err != nil {
		return nil, err
	}
	if t.Spec.ExpiresAt == nil {
		return nil, nil
	}
	until := t.Spec.ExpiresAt.Time
	return &until, nil
}

// Create certifies the key.
func (r *SSHCertificateREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*nodusv1.ReservedHostSSHCertificate)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a ReservedHostSSHCertificate, got %T", obj))
	}
	// One key of an accepted type and size, nothing else: the key is signed
	// into a certificate, and kept in the audit log.
	pub, _, err := sshvalue.ParseKey(strings.TrimSpace(req.PublicKey))
	if err != nil {
		return nil, apierrors.NewBadRequest("publicKey must be one SSH public key in authorized_keys format (ed25519, ECDSA, or RSA of 2048 to 16384 bits): " + err.Error())
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	gr := nodusv1.Resource("reservedhosts")
	got, err := r.Reservations.Get(genericapirequest.WithNamespace(ctx, ""), name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return nil, err
	}
	res := got.(*nodusv1.Reservation)
	if res.Spec.Project != namespace {
		return nil, apierrors.NewNotFound(gr, name)
	}
	now := time.Now()
	switch {
	case res.DeletionTimestamp != nil && res.Status.State != nodusv1.ReservationStateReleasing && res.Status.State != nodusv1.ReservationStateReleased:
		// Deleted, and kept by a finalizer: no access, whatever the
		// controller has written yet.
		return nil, apierror.New(ctx, apierror.ReasonTermEnded, gr, name, lifecycle.TermEndedMessage(res), "")
	case res.Status.State == nodusv1.ReservationStatePending || res.Status.State == "":
		return nil, apierror.New(ctx, apierror.ReasonReservationNotActive, gr, name, fmt.Sprintf("reservedhost %q is not active yet", name), "")
	case res.Status.State == nodusv1.ReservationStateReleasing || res.Status.State == nodusv1.ReservationStateReleased:
		return nil, apierror.New(ctx, apierror.ReasonAlreadyReleased, gr, name, fmt.Sprintf("reservedhost %q was released: no more access", name), "")
	case res.Status.State != nodusv1.ReservationStateActive || !now.Before(res.Spec.EndsAt.Time):
		return nil, apierror.New(ctx, apierror.ReasonTermEnded, gr, name, fmt.Sprintf("the term of reservedhost %q ended", name), "")
	}
	if err := r.stillMay(ctx, namespace, name); err != nil {
		return nil, err
	}
	node, err := r.Nodes.Get(genericapirequest.WithNamespace(ctx, ""), res.Status.Node, &metav1.GetOptions{})
	// Refused as the provider's doing, never a retry's matter (503 said
	// to retry and to check the server), and naming the host, never the
	// node: node names are the supplier's.
	askTheOperator := fmt.Sprintf("Ask your operator about the host's machine (`nodus hosts get %s/%s` shows its Connected condition); release the host (`nodus release %s/%s`) if it is gone for good.",
		namespace, name, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, apierror.New(ctx, apierror.ReasonNodeNotFound, gr, name,
			fmt.Sprintf("reservedhost %q has no machine to connect to now: its provider removed it", name), askTheOperator)
	}
	if err != nil {
		return nil, err
	}
	if !lifecycle.Holds(res, node.(*nodusv1.Node)) {
		// A machine enrolled under the name of the one the operator
		// deleted, which this reservation has not claimed (it is in
		// maintenance, say): not the tenant's until the claim is in the
		// store, and its address is not theirs to learn.
		return nil, apierror.New(ctx, apierror.ReasonNodeNotFound, gr, name,
			fmt.Sprintf("reservedhost %q has no machine to connect to now: its provider replaced it, and the new one is not this reservation's yet", name), askTheOperator)
	}
	if node.(*nodusv1.Node).Status.SSHAddress == "" {
		// A certificate without an address is of no use, and the CLI
		// would take the answer for a server's fault.
		return nil, apierror.New(ctx, apierror.ReasonSSHAddressUnknown, gr, name,
			fmt.Sprintf("the agent of reservedhost %q reports no address where its SSH server is reached", name), "")
	}
	validBefore := now.Add(MaxCertificateLifetime)
	if res.Spec.EndsAt.Time.Before(validBefore) {
		validBefore = res.Spec.EndsAt.Time
	}
	if until, err := r.tokenEnds(ctx, name); err != nil {
		return nil, err
	} else if until != nil && until.Before(validBefore) {
		validBefore = *until
	}
	user := "unknown"
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		user = u.GetName()
	}
	principal := sshvalue.Principal(res.Name, res.UID, res.Status.Epoch)
	answer := &nodusv1.ReservedHostSSHCertificate{
		PublicKey: req.PublicKey, Principal: principal, LoginUser: res.Status.LoginUser, Epoch: res.Status.Epoch,
		Address: node.(*nodusv1.Node).Status.SSHAddress, ValidBefore: &metav1.Time{Time: validBefore.Truncate(time.Second)},
	}
	if len(options.DryRun) > 0 {
		return answer, nil
	}
	cert, err := r.CA.Sign(pub, fmt.Sprintf("user=%s request=%s", user, exchange.From(ctx).RequestID()), principal, validBefore)
	if err != nil {
		return nil, err
	}
	answer.Certificate = string(ssh.MarshalAuthorizedKey(cert))
	return answer, nil
}
