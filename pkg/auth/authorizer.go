package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/selection"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// Authorizer applies Nodus' roles:
//   - operators (and the server's own loopback client) may do everything;
//   - anyone, even without credentials, may read the public paths;
//   - any authenticated user may read discovery and OpenAPI, list the
//     namespaces (filtered to its projects) and get its projects;
//   - in a project's namespace, a viewer reads ReservedHosts (and their
//     status); member and admin add the actions later kinds define.
//
// Nobody but operators writes ReservedHosts, and nobody but operators sees
// cluster-scoped operator kinds.
type Authorizer struct {
	Projects ProjectGetter
	Nodes    NodeGetter
	// Tokens, when set, reads the AccessToken of a write (a tenant's or an
	// operator's) as stored: a token revoked a moment ago that the
	// authenticator's cache still holds makes no write.
	Tokens AccessTokenGetter

	// rechecks budgets the etcd reads that make sure a refusal is not the
	// cache's lag (a project or membership made a moment ago): a caller
	// sending request after request to projects it is not in cost one
	// quorum read each. Past the budget the cache decides a refusal. Each
	// caller has a share of it, so that one cannot spend everyone's.
	rechecksMu     sync.Mutex
	rechecks       *rate.Limiter
	callerRechecks map[string]*rate.Limiter
}

// Refusals checked against etcd, per second and at once: on one server,
// and of one caller.
const (
	refusalRechecksPerSecond       = 50
	refusalRechecksBurst           = 100
	callerRefusalRechecksPerSecond = 5
	callerRefusalRechecksBurst     = 20
	// callersRechecked bounds the callers whose shares are kept; past it
	// every share starts afresh.
	callersRechecked = 4096
)

func (a *Authorizer) recheckRefusal(caller string) bool {
	a.rechecksMu.Lock()
	defer a.rechecksMu.Unlock()
	if a.rechecks == nil {
		a.rechecks = rate.NewLimiter(refusalRechecksPerSecond, refusalRechecksBurst)
	}
	share, ok := a.callerRechecks[caller]
	if !ok {
		if a.callerRechecks == nil || len(a.callerRechecks) >= callersRechecked {
			a.callerRechecks = map[string]*rate.Limiter{}
		}
		share = rate.NewLimiter(callerRefusalRechecksPerSecond, callerRefusalRechecksBurst)
		a.callerRechecks[caller] = share
	}
	// The caller's share first: a caller past it spends nothing of the rest.
	return share.Allow() && a.rechecks.Allow()
}

// AccessTokenGetter reads an AccessToken by name.
type AccessTokenGetter interface {
	// GetAccessToken reads from a cache unless fresh asks for the latest version.
	GetAccessToken(ctx context.Context, name string, fresh bool) (*nodusv1.AccessToken, error)
}

// NodeGetter reads a Node by name.
type NodeGetter interface {
	// GetNode reads from a cache unless fresh asks for the latest version.
	GetNode(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error)
}

// readVerbs only observe.
var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// projectReadable are the namespaced resources a project's viewers read.
var projectReadable = map[string]bool{"reservedhosts": true, "executions": true, "hostlendings": true}

// projectReadableSubresources are the subresources beyond status that a project's viewers read.
var projectReadableSubresources = map[string]bool{"executions/log": true}

// projectWritable are the namespaced resources a project's members create
// and delete (borrowers submit and cancel executions).
var projectWritable = map[string]bool{"executions": true}

// projectActions are the action subresources (POST) of a project and the
// least role that may take them.
var projectActions = map[string]nodusv1.ProjectRole{
	"reservedhosts/release-capacity": nodusv1.ProjectRoleAdmin,
	"reservedhosts/ssh-certificate":  nodusv1.ProjectRoleMember,
	"reservedhosts/lend":             nodusv1.ProjectRoleAdmin,
	"reservedhosts/withdraw":         nodusv1.ProjectRoleAdmin,
	"executions/cancel":              nodusv1.ProjectRoleMember,
}

func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	if passesForTheSystem(attrs) {
		return authorizer.DecisionDeny, "no one acts as a system: user or group: the server itself is one, and writes what no one else may", nil
	}
	if IsOperator(u) {
		// An operator's write can do more than any tenant's: one by a token
		// revoked a moment ago, which the authenticator's cache still
		// holds, is refused as a tenant's is. Reads are not writes, nor
		// are a non-resource path's HEAD and OPTIONS (a resource's HEAD
		// arrives as get).
		if verb := attrs.GetVerb(); !readVerbs[verb] && verb != "head" && verb != "options" {
			if why, err := a.tokenRevoked(ctx, u); err != nil {
				return authorizer.DecisionNoOpinion, "", err
			} else if why != "" {
				return authorizer.DecisionDeny, why, nil
			}
		}
		return authorizer.DecisionAllow, "operator", nil
	}
	if node, generation, ok := NodeOf(u); ok {
		return a.agent(ctx, attrs, node, generation)
	}
	if slices.Contains(u.GetGroups(), GroupEnrollers) {
		// Nodes are cluster-scoped: a path that names a namespace is no
		// node's (and would scope its records to a name of the caller's).
		if attrs.IsResourceRequest() && attrs.GetAPIGroup() == nodusv1.GroupName && attrs.GetResource() == "nodes" &&
			attrs.GetNamespace() == "" && attrs.GetSubresource() == "enroll" && attrs.GetVerb() == "create" {
			return authorizer.DecisionAllow, "enrollment", nil
		}
		return authorizer.DecisionDeny, "an enrollment token may only enroll a node", nil
	}
	if !attrs.IsResourceRequest() {
		return a.nonResource(u, attrs)
	}
	if !isAuthenticated(u) {
		return authorizer.DecisionDeny, "anonymous requests may only read public paths", nil
	}
	switch attrs.GetAPIGroup() {
	case "":
		if attrs.GetResource() == "namespaces" && attrs.GetSubresource() == "" {
			switch attrs.GetVerb() {
			case "list", "watch":
				// The namespace storage filters to the caller's projects.
				return authorizer.DecisionAllow, "", nil
			case "get":
				return a.inProject(ctx, u, attrs.GetName(), nodusv1.ProjectRoleViewer, cachedMembership)
			}
		}
	case nodusv1.GroupName:
		if attrs.GetResource() == "projects" && attrs.GetSubresource() == "" && attrs.GetVerb() == "get" {
			return a.inProject(ctx, u, attrs.GetName(), nodusv1.ProjectRoleViewer, cachedMembership)
		}
		if attrs.GetNamespace() != "" && projectReadable[attrs.GetResource()] && readVerbs[attrs.GetVerb()] &&
			(attrs.GetSubresource() == "" || attrs.GetSubresource() == "status" ||
				projectReadableSubresources[attrs.GetResource()+"/"+attrs.GetSubresource()]) {
			return a.inProject(ctx, u, attrs.GetNamespace(), nodusv1.ProjectRoleViewer, cachedMembership)
		}
		if attrs.GetNamespace() != "" && projectWritable[attrs.GetResource()] && attrs.GetSubresource() == "" &&
			(attrs.GetVerb() == "create" || attrs.GetVerb() == "delete") {
			return a.inProject(ctx, u, attrs.GetNamespace(), nodusv1.ProjectRoleMember, latestMembership)
		}
		if role, ok := projectActions[attrs.GetResource()+"/"+attrs.GetSubresource()]; ok && attrs.GetVerb() == "create" && attrs.GetNamespace() != "" {
			return a.inProject(ctx, u, attrs.GetNamespace(), role, latestMembership)
		}
	}
	return authorizer.DecisionDeny, "only operators may " + attrs.GetVerb() + " " + resourceName(attrs), nil
}

func (a *Authorizer) nonResource(u user.Info, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	path := attrs.GetPath()
	if IsPublicPath(path) {
		return authorizer.DecisionAllow, "public", nil
	}
	if !isAuthenticated(u) || attrs.GetVerb() != "get" {
		return authorizer.DecisionDeny, "", nil
	}
	for _, prefix := range []string{"/api", "/apis", "/openapi", "/whoami"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return authorizer.DecisionAllow, "discovery", nil
		}
	}
	return authorizer.DecisionDeny, "only operators may read " + path, nil
}

// membershipRead says which version of a project decides a request.
type membershipRead bool

const (
	// cachedMembership decides a read on the watch cache: a member removed
	// a moment ago reads on for the milliseconds the cache lags, as with
	// Kubernetes RBAC.
	cachedMembership membershipRead = false
	// latestMembership decides a write on the project as stored: releasing
	// capacity cannot be undone and lending lets another project in, so
	// once a removal is stored, no write of the removed member passes. One
	// quorum read per tenant write; operators and reads never pay it.
	latestMembership membershipRead = true
)

func (a *Authorizer) inProject(ctx context.Context, u user.Info, project string, want nodusv1.ProjectRole, read membershipRead) (authorizer.Decision, string, error) {
	if project == "" {
		return authorizer.DecisionDeny, "across all projects only operators may read", nil
	}
	if len(utilvalidation.IsDNS1123Label(project)) > 0 {
		// No project has such a name (a project's is its namespace's): the
		// store would refuse to read it, an error the caller must not get
		// as a 500.
		return authorizer.DecisionDeny, notMember(u, project), nil
	}
	p, err := a.Projects.GetProject(ctx, project, false)
	refused := apierrors.IsNotFound(err) || (err == nil && !allowedIn(p, u, want))
	if refused && a.recheckRefusal(u.GetName()) || !refused && read == latestMembership {
		// Before refusing, make sure the cache is not just behind a project
		// or membership created a moment ago; a write that the cache lets
		// pass is decided on the project as stored.
		p, err = a.Projects.GetProject(ctx, project, true)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return authorizer.DecisionNoOpinion, "", err
	}
	role, ok := nodusv1.ProjectRole(""), false
	if err == nil {
		role, ok = RoleIn(p, u)
	}
	if !ok {
		// One answer for a project that does not exist and one the caller
		// is not in: a refusal must not tell which projects exist.
		return authorizer.DecisionDeny, notMember(u, project), nil
	}
	if !Allows(role, want) {
		return authorizer.DecisionDeny, "role " + string(role) + " in project " + project + " does not allow this", nil
	}
	if read == latestMembership {
		if why, err := a.tokenRevoked(ctx, u); err != nil {
			return authorizer.DecisionNoOpinion, "", err
		} else if why != "" {
			return authorizer.DecisionDeny, why, nil
		}
	}
	return authorizer.DecisionAllow, string(role), nil
}

// tokenRevoked says why the AccessToken u authenticated with, read as
// stored, no longer holds ("" when it does, or u has none): the
// authenticator read it from a cache, which may not show a revocation
// answered a moment ago, and a write such as a release cannot be undone.
// A token made again under the revoked one's name is another object (its
// UID differs), perhaps another user's: it does not keep the old one on.
func (a *Authorizer) tokenRevoked(ctx context.Context, u user.Info) (string, error) {
	name, uid, ok := AccessTokenOf(u)
	if a.Tokens == nil || !ok {
		return "", nil
	}
	t, err := a.Tokens.GetAccessToken(ctx, name, true)
	switch {
	case apierrors.IsNotFound(err), err == nil && (t.DeletionTimestamp != nil || string(t.UID) != uid):
		return "the access token of this request was revoked", nil
	case err != nil:
		return "", err
	case t.Spec.ExpiresAt != nil && !time.Now().Before(t.Spec.ExpiresAt.Time):
		return "the access token of this request expired", nil
	}
	return "", nil
}

// notMember is the refusal for a project the caller is not in, whether or
// not it exists.
func notMember(u user.Info, project string) string {
	return fmt.Sprintf("%s is not a member of project %q (or there is no such project)", u.GetName(), project)
}

func allowedIn(p *nodusv1.Project, u user.Info, want nodusv1.ProjectRole) bool {
	role, ok := RoleIn(p, u)
	return ok && Allows(role, want)
}

func isAuthenticated(u user.Info) bool {
	for _, g := range u.GetGroups() {
		if g == GroupAuthenticated {
			return true
		}
	}
	return false
}

func resourceName(attrs authorizer.Attributes) string {
	r := attrs.GetResource()
	if s := attrs.GetSubresource(); s != "" {
		r += "/" + s
	}
	return r
}

// ConditionsAwareAuthorize implements authorizer.Authorizer; Nodus' rules are unconditional.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions implements authorizer.Authorizer; there are no conditions to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// agent applies the node restriction: a node's agent reads and writes its
// own Node's status and heartbeat, and watches the reservations placed on
// it — with a credential of the node's current agent generation only.
func (a *Authorizer) agent(ctx context.Context, attrs authorizer.Attributes, node string, generation int64) (authorizer.Decision, string, error) {
	if !attrs.IsResourceRequest() {
		if attrs.GetVerb() == "get" && (strings.HasPrefix(attrs.GetPath(), "/api") || IsPublicPath(attrs.GetPath())) {
			return authorizer.DecisionAllow, "discovery", nil
		}
		return authorizer.DecisionDeny, "node agents only use the API", nil
	}
	uid := NodeUIDOf(attrs.GetUser())
	n, err := a.Nodes.GetNode(ctx, node, false)
	if apierrors.IsNotFound(err) || (err == nil && (n.Status.AgentGeneration < generation || string(n.UID) != uid)) {
		// The cache may not have the enrollment that issued this credential
		// yet (an agent's first call follows it at once): ask the store.
		n, err = a.Nodes.GetNode(ctx, node, true)
	}
	if apierrors.IsNotFound(err) {
		n = nil
	} else if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if reason := retired(n, node, generation, uid); reason != "" {
		x := exchange.From(ctx)
		x.SetReason(string(apierror.ReasonAgentCredentialRetired))
		x.SetFix("This agent's credential no longer works: stop this agent, or have an operator issue a token for node " + node +
			" (`nodus pools token POOL --node " + node + "`) and enroll it anew (`nodusd enroll`).")
		return authorizer.DecisionDeny, reason, nil
	}
	if attrs.GetAPIGroup() != nodusv1.GroupName {
		return authorizer.DecisionDeny, "node agents only use nodus.dev", nil
	}
	verb, sub := attrs.GetVerb(), attrs.GetSubresource()
	clusterScoped := attrs.GetNamespace() == ""
	switch attrs.GetResource() {
	case "nodes":
		own := attrs.GetName() == node && clusterScoped
		switch {
		case own && sub == "" && verb == "get",
			own && sub == "status" && (verb == "get" || verb == "update" || verb == "patch"),
			own && sub == "heartbeat" && verb == "create",
			own && sub == "renew" && verb == "create",
			sub == "" && (verb == "list" || verb == "watch") && clusterScoped && selects(attrs, "metadata.name", node):
			return authorizer.DecisionAllow, "own node", nil
		}
	case "reservations":
		if sub == "" && (verb == "list" || verb == "watch") && clusterScoped && selects(attrs, "status.node", node) {
			return authorizer.DecisionAllow, "reservations on own node", nil
		}
	case "executions":
		// The agent sees only executions placed on its host, and reports
		// them; the report action checks the placement again.
		if sub == "" && (verb == "list" || verb == "watch") && attrs.GetNamespace() == "" && selects(attrs, "status.host", lending.HostAlias(n)) {
			return authorizer.DecisionAllow, "executions on own host", nil
		}
		// A project's name: anything else names no execution (and "..",
		// as a storage key, failed as a 500).
		if sub == "report" && verb == "create" && len(utilvalidation.IsDNS1123Label(attrs.GetNamespace())) == 0 {
			return authorizer.DecisionAllow, "reports executions on own host", nil
		}
	}
	return authorizer.DecisionDeny, "node " + node + "'s agent may only use its own node, the reservations on it and the executions placed on it", nil
}

// AgentRetired says why agent u's credential is not that of the current
// agent of n, its own node read by name ("" when it is, or when u is no
// agent). The authorizer checks it against the watch cache; an action that
// changes what the server decides on an agent's word checks it again
// against n read from etcd, as a cache that has not seen a re-enrollment
// yet still shows the old generation.
func AgentRetired(u user.Info, n *nodusv1.Node) string {
	node, generation, ok := NodeOf(u)
	if !ok {
		return ""
	}
	return retired(n, node, generation, NodeUIDOf(u))
}

// retired says why an agent credential for node, of generation and bound
// to the Node object uid, no longer authorizes anything; "" when it does.
// n is nil when no node of that name exists.
func retired(n *nodusv1.Node, node string, generation int64, uid string) string {
	switch {
	case n == nil:
		return "node " + node + " does not exist"
	case uid == "" || string(n.UID) != uid:
		return "this credential was issued for a node " + node + " that was deleted; the node of that name now is another object"
	case n.Status.AgentGeneration != generation:
		return fmt.Sprintf("this credential is of agent generation %d; node %s was enrolled again (generation %d)",
			generation, node, n.Status.AgentGeneration)
	case n.DeletionTimestamp != nil:
		// Deleted, and held only by a finalizer: its credentials end now,
		// not when the finalizer goes.
		return "node " + node + " was deleted"
	}
	return ""
}

// selects says whether the request's field selector pins field to value.
func selects(attrs authorizer.Attributes, field, value string) bool {
	reqs, err := attrs.GetFieldSelector()
	if err != nil {
		return false
	}
	for _, r := range reqs {
		if r.Field == field && (r.Operator == selection.Equals || r.Operator == selection.DoubleEquals) && r.Value == value {
			return true
		}
	}
	return false
}

// passesForTheSystem says whether attrs ask to impersonate a system: user
// or group (Kubernetes' names, the server's own loopback among them:
// system:apiserver in system:masters, which alone writes a node's claims).
func passesForTheSystem(attrs authorizer.Attributes) bool {
	if attrs.GetVerb() != "impersonate" || attrs.GetAPIGroup() != "" {
		return false
	}
	switch attrs.GetResource() {
	case "users", "groups":
		return validation.IsSystemName(attrs.GetName())
	}
	return false
}
