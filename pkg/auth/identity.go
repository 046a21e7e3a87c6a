// Package auth decides who a request comes from (bearer AccessTokens and
// client certificates of the server CA) and what it may do (operators do
// everything; project members act in their project by role).
package auth

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

const (
	// GroupOperators may do everything.
	GroupOperators = "nodus:operators"
	// GroupAuthenticated holds every user with a valid credential.
	GroupAuthenticated = "nodus:authenticated"
	// AdminUser is the bootstrap operator written into admin.kubeconfig.
	AdminUser = "nodus-admin"
	// GroupNodes holds every node agent; an agent's user is NodeUserPrefix + node name.
	GroupNodes     = "nodus:nodes"
	NodeUserPrefix = "nodus:node:"
	// GroupEnrollers holds the bearers of enrollment tokens.
	GroupEnrollers = "nodus:enrollers"
	// ExtraEnrollmentToken names the enrollment token a request came with.
	ExtraEnrollmentToken = "nodus.dev/enrollment-token"
	// ExtraEnrollmentTokenUID is the UID of that token as authenticated
	// (from the watch cache): one deleted and made again under its name is
	// another, which the old token's secret does not use up.
	ExtraEnrollmentTokenUID = "nodus.dev/enrollment-token-uid"
	// ExtraAgentGeneration is the agent generation a node credential was issued for.
	ExtraAgentGeneration = "nodus.dev/agent-generation"
	// ExtraAccessToken names the AccessToken a request authenticated with.
	ExtraAccessToken = "nodus.dev/access-token"
	// ExtraAccessTokenUID is the UID of that AccessToken as authenticated: a
	// token deleted and made again under its name is another object.
	ExtraAccessTokenUID = "nodus.dev/access-token-uid"
	// ExtraNodeUID is the UID of the Node object a node credential was issued for.
	ExtraNodeUID = "nodus.dev/node-uid"
)

// GenerationUnit is the certificate OU that carries an agent generation.
func GenerationUnit(generation int64) string { return fmt.Sprintf("generation-%d", generation) }

// NodeUIDUnit is the certificate OU that binds an agent credential to one
// Node object: a node deleted and enrolled again under the same name is a
// new object, and the old object's credentials never match it.
func NodeUIDUnit(uid string) string { return "node-uid-" + uid }

// NodeUIDOf returns the Node UID an agent user's credential is bound to.
func NodeUIDOf(u user.Info) string {
	if uids := u.GetExtra()[ExtraNodeUID]; len(uids) == 1 {
		return uids[0]
	}
	return ""
}

// AccessTokenOf returns the name and UID of the AccessToken u
// authenticated with; ok is false for a caller without one (an operator's
// certificate, an agent).
func AccessTokenOf(u user.Info) (name, uid string, ok bool) {
	names, uids := u.GetExtra()[ExtraAccessToken], u.GetExtra()[ExtraAccessTokenUID]
	if len(names) != 1 || len(uids) > 1 {
		return "", "", false
	}
	if len(uids) == 1 {
		uid = uids[0]
	}
	return names[0], uid, true
}

// NodeOf returns the node an agent user acts for, and its credential's generation.
func NodeOf(u user.Info) (node string, generation int64, ok bool) {
	name, found := strings.CutPrefix(u.GetName(), NodeUserPrefix)
	if !found || !slices.Contains(u.GetGroups(), GroupNodes) {
		return "", 0, false
	}
	gens := u.GetExtra()[ExtraAgentGeneration]
	if len(gens) != 1 {
		return "", 0, false
	}
	g, err := strconv.ParseInt(gens[0], 10, 64)
	return name, g, err == nil
}

// ProjectGetter reads a Project by name.
type ProjectGetter interface {
	// GetProject reads from a cache unless fresh asks for the latest version.
	GetProject(ctx context.Context, name string, fresh bool) (*nodusv1.Project, error)
}

// IsOperator says whether u acts for the operators (or is the server itself).
func IsOperator(u user.Info) bool {
	groups := u.GetGroups()
	return slices.Contains(groups, GroupOperators) || slices.Contains(groups, user.SystemPrivilegedGroup)
}

// RoleIn returns u's strongest role in p.
func RoleIn(p *nodusv1.Project, u user.Info) (nodusv1.ProjectRole, bool) {
	best, found := nodusv1.ProjectRole(""), false
	for _, m := range p.Spec.Members {
		match := (m.Kind == nodusv1.MemberKindGroup && slices.Contains(u.GetGroups(), m.Name)) ||
			(m.Kind != nodusv1.MemberKindGroup && m.Name == u.GetName())
		if match && (!found || rank(m.Role) > rank(best)) {
			best, found = m.Role, true
		}
	}
	return best, found
}

// LosesSSH says whether changing a project's members from old to updated
// takes SSH access (the member role, or admin) away from any entry, user
// or group: removed, or made a viewer.
func LosesSSH(old, updated []nodusv1.ProjectMember) bool {
	ssh := func(members []nodusv1.ProjectMember) map[nodusv1.ProjectMember]bool {
		out := map[nodusv1.ProjectMember]bool{}
		for _, m := range members {
			if Allows(m.Role, nodusv1.ProjectRoleMember) {
				kind := m.Kind
				if kind == "" {
					kind = nodusv1.MemberKindUser
				}
				out[nodusv1.ProjectMember{Kind: kind, Name: m.Name}] = true
			}
		}
		return out
	}
	now := ssh(updated)
	for entry := range ssh(old) {
		if !now[entry] {
			return true
		}
	}
	return false
}

// Allows says whether role includes want.
func Allows(role, want nodusv1.ProjectRole) bool { return rank(role) >= rank(want) }

func rank(r nodusv1.ProjectRole) int {
	switch r {
	case nodusv1.ProjectRoleViewer:
		return 1
	case nodusv1.ProjectRoleMember:
		return 2
	case nodusv1.ProjectRoleAdmin:
		return 3
	}
	return 0
}
