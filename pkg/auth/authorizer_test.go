package auth

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// laggingStore is a watch cache that has not caught up with etcd yet:
// cached objects are what the cache holds, latest what a fresh read returns.
type laggingStore struct {
	cachedProjects, latestProjects map[string]*nodusv1.Project
	cachedNodes, latestNodes       map[string]*nodusv1.Node
	latestTokens                   map[string]*nodusv1.AccessToken
	freshReads                     int
}

func (s *laggingStore) GetAccessToken(_ context.Context, name string, fresh bool) (*nodusv1.AccessToken, error) {
	if fresh {
		s.freshReads++
	}
	if t, ok := s.latestTokens[name]; ok {
		return t, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: nodusv1.GroupName, Resource: "accesstokens"}, name)
}

func (s *laggingStore) GetProject(_ context.Context, name string, fresh bool) (*nodusv1.Project, error) {
	from := s.cachedProjects
	if fresh {
		s.freshReads++
		from = s.latestProjects
	}
	if p, ok := from[name]; ok {
		return p, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: nodusv1.GroupName, Resource: "projects"}, name)
}

func (s *laggingStore) GetNode(_ context.Context, name string, fresh bool) (*nodusv1.Node, error) {
	from := s.cachedNodes
	if fresh {
		s.freshReads++
		from = s.latestNodes
	}
	if n, ok := from[name]; ok {
		return n, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: nodusv1.GroupName, Resource: "nodes"}, name)
}

func projectWith(members ...nodusv1.ProjectMember) *nodusv1.Project {
	return &nodusv1.Project{Spec: nodusv1.ProjectSpec{Members: members}}
}

func nodeAt(generation int64) *nodusv1.Node {
	return &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{UID: "uid-1"}, Status: nodusv1.NodeStatus{AgentGeneration: generation}}
}

// recreatedAt is node n1 deleted and enrolled again: another object.
func recreatedAt(generation int64) *nodusv1.Node {
	n := nodeAt(generation)
	n.UID = "uid-2"
	return n
}

// TestAuthorizerLooksPastALaggingCache: a refusal is decided on the latest
// objects, so a project, membership or enrollment made a moment ago counts
// at once; an allowed read never pays for a fresh read, and a project's
// write is decided on the latest membership, so a removal counts at once.
func TestAuthorizerLooksPastALaggingCache(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{GroupAuthenticated}}
	agent := func(generation int64) user.Info {
		return &user.DefaultInfo{Name: NodeUserPrefix + "n1", Groups: []string{GroupNodes, GroupAuthenticated},
			Extra: map[string][]string{ExtraAgentGeneration: {strconv.FormatInt(generation, 10)}, ExtraNodeUID: {"uid-1"}}}
	}
	readHosts := authorizer.AttributesRecord{Verb: "list", APIGroup: nodusv1.GroupName, Resource: "reservedhosts", Namespace: "acme", ResourceRequest: true}
	readOwnNode := authorizer.AttributesRecord{Verb: "get", APIGroup: nodusv1.GroupName, Resource: "nodes", Name: "n1", ResourceRequest: true}
	release := authorizer.AttributesRecord{Verb: "create", APIGroup: nodusv1.GroupName, Resource: "reservedhosts", Subresource: "release-capacity", Namespace: "acme", Name: "h1", ResourceRequest: true}
	lend := authorizer.AttributesRecord{Verb: "create", APIGroup: nodusv1.GroupName, Resource: "reservedhosts", Subresource: "lend", Namespace: "acme", Name: "h1", ResourceRequest: true}
	deleteExecution := authorizer.AttributesRecord{Verb: "delete", APIGroup: nodusv1.GroupName, Resource: "executions", Namespace: "acme", Name: "e1", ResourceRequest: true}
	aliceByToken := &user.DefaultInfo{Name: "alice", Groups: []string{GroupAuthenticated},
		Extra: map[string][]string{ExtraAccessToken: {"alice-laptop"}, ExtraAccessTokenUID: {"uid-laptop"}}}
	tokenExpiring := func(in time.Duration) *nodusv1.AccessToken {
		return &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{UID: "uid-laptop"},
			Spec: nodusv1.AccessTokenSpec{User: "alice", ExpiresAt: &metav1.Time{Time: time.Now().Add(in)}}}
	}
	withUID := func(t *nodusv1.AccessToken, uid types.UID) *nodusv1.AccessToken { t.UID = uid; return t }
	opsByToken := &user.DefaultInfo{Name: "ops", Groups: []string{GroupOperators, GroupAuthenticated},
		Extra: map[string][]string{ExtraAccessToken: {"ops-laptop"}, ExtraAccessTokenUID: {"uid-ops"}}}
	opsByCertificate := &user.DefaultInfo{Name: "admin", Groups: []string{GroupOperators, GroupAuthenticated}}
	opsToken := &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{UID: "uid-ops"}, Spec: nodusv1.AccessTokenSpec{User: "ops", Groups: []string{GroupOperators}}}
	deleteNode := authorizer.AttributesRecord{Verb: "delete", APIGroup: nodusv1.GroupName, Resource: "nodes", Name: "n1", ResourceRequest: true}
	listNodes := authorizer.AttributesRecord{Verb: "list", APIGroup: nodusv1.GroupName, Resource: "nodes", ResourceRequest: true}
	ironicWrite := authorizer.AttributesRecord{Verb: "post", Path: "/v1/allocations"}
	aliceAdmin := nodusv1.ProjectMember{Kind: nodusv1.MemberKindUser, Name: "alice", Role: nodusv1.ProjectRoleAdmin}
	aliceMember := nodusv1.ProjectMember{Kind: nodusv1.MemberKindUser, Name: "alice", Role: nodusv1.ProjectRoleViewer}
	bob := nodusv1.ProjectMember{Kind: nodusv1.MemberKindUser, Name: "bob", Role: nodusv1.ProjectRoleAdmin}

	cases := map[string]struct {
		store      laggingStore
		user       user.Info
		attrs      authorizer.AttributesRecord
		allowed    bool
		freshReads int
	}{
		"member in the cache": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(aliceMember)}},
			user:  alice, attrs: readHosts, allowed: true, freshReads: 0,
		},
		"project not cached yet": {
			store: laggingStore{latestProjects: map[string]*nodusv1.Project{"acme": projectWith(aliceMember)}},
			user:  alice, attrs: readHosts, allowed: true, freshReads: 1,
		},
		"membership not cached yet": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceMember)}},
			user: alice, attrs: readHosts, allowed: true, freshReads: 1,
		},
		"a stranger, checked twice": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)}},
			user: alice, attrs: readHosts, allowed: false, freshReads: 1,
		},
		"membership removed, cache behind": {
			// The cache still allows: removal takes effect when the cache
			// catches up (milliseconds), like Kubernetes RBAC.
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceMember)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)}},
			user: alice, attrs: readHosts, allowed: true, freshReads: 0,
		},
		"admin removed, cache behind: no release": {
			// Releasing capacity cannot be undone, and lending lets another
			// project in: once the removal is stored, neither passes.
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)}},
			user: alice, attrs: release, allowed: false, freshReads: 1,
		},
		"admin made a viewer, cache behind: no lending": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceMember)}},
			user: alice, attrs: lend, allowed: false, freshReads: 1,
		},
		"member removed, cache behind: no delete": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, nodusv1.ProjectMember{Kind: nodusv1.MemberKindUser, Name: "alice", Role: nodusv1.ProjectRoleMember})},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob)}},
			user: alice, attrs: deleteExecution, allowed: false, freshReads: 1,
		},
		// The authenticator read the token from its cache; the write reads it as stored.
		"a revoked token, cache behind: no release": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)}},
			user: aliceByToken, attrs: release, allowed: false, freshReads: 2,
		},
		"an expired token, cache behind: no lending": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestTokens:   map[string]*nodusv1.AccessToken{"alice-laptop": tokenExpiring(-time.Minute)}},
			user: aliceByToken, attrs: lend, allowed: false, freshReads: 2,
		},
		"a token made again under its name, cache behind: no release": {
			// The name is another object's now, perhaps another user's.
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestTokens:   map[string]*nodusv1.AccessToken{"alice-laptop": withUID(tokenExpiring(time.Hour), "made-again")}},
			user: aliceByToken, attrs: release, allowed: false, freshReads: 2,
		},
		"a token as stored releases": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestTokens:   map[string]*nodusv1.AccessToken{"alice-laptop": tokenExpiring(time.Hour)}},
			user: aliceByToken, attrs: release, allowed: true, freshReads: 2,
		},
		// An operator's write can do more than any tenant's: a token revoked
		// a moment ago makes none either.
		"an operator's revoked token, cache behind: no write": {
			user: opsByToken, attrs: deleteNode, allowed: false, freshReads: 1,
		},
		"an operator's revoked token, cache behind: no /v1 write": {
			user: opsByToken, attrs: ironicWrite, allowed: false, freshReads: 1,
		},
		"an operator's token as stored writes": {
			store: laggingStore{latestTokens: map[string]*nodusv1.AccessToken{"ops-laptop": opsToken}},
			user:  opsByToken, attrs: deleteNode, allowed: true, freshReads: 1,
		},
		"an operator's read never reads the token": {
			user: opsByToken, attrs: listNodes, allowed: true, freshReads: 0,
		},
		"an operator's certificate has no token to read": {
			user: opsByCertificate, attrs: deleteNode, allowed: true, freshReads: 0,
		},
		"a read never reads the token": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(aliceMember)}},
			user:  aliceByToken, attrs: readHosts, allowed: true, freshReads: 0,
		},
		"an admin releases on one fresh read": {
			store: laggingStore{cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)},
				latestProjects: map[string]*nodusv1.Project{"acme": projectWith(bob, aliceAdmin)}},
			user: alice, attrs: release, allowed: true, freshReads: 1,
		},
		"agent enrolled a moment ago": {
			store: laggingStore{cachedNodes: map[string]*nodusv1.Node{"n1": nodeAt(0)}, latestNodes: map[string]*nodusv1.Node{"n1": nodeAt(1)}},
			user:  agent(1), attrs: readOwnNode, allowed: true, freshReads: 1,
		},
		"node created a moment ago": {
			store: laggingStore{latestNodes: map[string]*nodusv1.Node{"n1": nodeAt(1)}},
			user:  agent(1), attrs: readOwnNode, allowed: true, freshReads: 1,
		},
		"a deleted node's credential, checked twice": {
			store: laggingStore{cachedNodes: map[string]*nodusv1.Node{"n1": recreatedAt(1)}, latestNodes: map[string]*nodusv1.Node{"n1": recreatedAt(1)}},
			user:  agent(1), attrs: readOwnNode, allowed: false, freshReads: 1,
		},
		"node re-created, cache behind on it": {
			store: laggingStore{cachedNodes: map[string]*nodusv1.Node{"n1": recreatedAt(3)}, latestNodes: map[string]*nodusv1.Node{"n1": nodeAt(1)}},
			user:  agent(1), attrs: readOwnNode, allowed: true, freshReads: 1,
		},
		"a replaced agent needs no fresh read": {
			store: laggingStore{cachedNodes: map[string]*nodusv1.Node{"n1": nodeAt(2)}, latestNodes: map[string]*nodusv1.Node{"n1": nodeAt(2)}},
			user:  agent(1), attrs: readOwnNode, allowed: false, freshReads: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.attrs.User = tc.user
			a := &Authorizer{Projects: &tc.store, Nodes: &tc.store, Tokens: &tc.store}
			decision, reason, err := a.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if (decision == authorizer.DecisionAllow) != tc.allowed {
				t.Errorf("decision %v (%s), want allowed=%v", decision, reason, tc.allowed)
			}
			if tc.store.freshReads != tc.freshReads {
				t.Errorf("%d fresh reads, want %d", tc.store.freshReads, tc.freshReads)
			}
		})
	}
}

// TestRefusalsCostABoundedNumberOfReads: a refusal is checked against
// etcd in case the cache is behind, and a caller sending request after
// request to projects it is not in cost a quorum read each. Such checks
// have a budget, of which each caller has a share; past it the cache
// decides a refusal, and what the cache allows is decided as before.
func TestRefusalsCostABoundedNumberOfReads(t *testing.T) {
	caller := func(name string) user.Info {
		return &user.DefaultInfo{Name: name, Groups: []string{GroupAuthenticated}}
	}
	alice, mallory, carol := caller("alice"), caller("mallory"), caller("carol")
	admin := func(name string) nodusv1.ProjectMember {
		return nodusv1.ProjectMember{Kind: nodusv1.MemberKindUser, Name: name, Role: nodusv1.ProjectRoleAdmin}
	}
	store := &laggingStore{
		cachedProjects: map[string]*nodusv1.Project{"acme": projectWith(admin("alice"), admin("bob"))},
		// bob was removed a moment ago; carol's project was made a moment ago.
		latestProjects: map[string]*nodusv1.Project{"acme": projectWith(admin("alice")), "new": projectWith(admin("carol"))},
	}
	a := &Authorizer{Projects: store, Nodes: store, Tokens: store}
	request := func(u user.Info, verb, project string) authorizer.Decision {
		t.Helper()
		d, _, err := a.Authorize(context.Background(), authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: nodusv1.GroupName,
			Resource: "executions", Namespace: project, Name: "e1", ResourceRequest: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	start := time.Now()
	for i := range 2000 {
		verb := []string{"get", "delete"}[i%2]
		if request(mallory, verb, []string{"acme", "nowhere"}[i%2]) == authorizer.DecisionAllow {
			t.Fatalf("mallory may %s", verb)
		}
	}
	share := callerRefusalRechecksBurst + int(time.Since(start).Seconds()*callerRefusalRechecksPerSecond) + 1
	if store.freshReads > share {
		t.Errorf("2,000 refused requests of one caller cost %d reads from etcd; its share allows %d", store.freshReads, share)
	}
	if request(carol, "get", "new") != authorizer.DecisionAllow {
		t.Error("a project the cache does not hold yet, another caller's share spent: refused")
	}
	// Many callers together spend no more than the whole budget.
	before, start := store.freshReads, time.Now()
	for i := range 4000 {
		request(caller(fmt.Sprintf("u%d", i%400)), "get", "acme")
	}
	budget := refusalRechecksBurst + int(time.Since(start).Seconds()*refusalRechecksPerSecond) + 1
	if n := store.freshReads - before; n > budget {
		t.Errorf("4,000 refused requests of 400 callers cost %d reads from etcd; the budget allows %d", n, budget)
	}
	// Past the budget a write the cache allows is still decided on the
	// project as stored (bob's removal counts), and a member's read on the cache.
	before = store.freshReads
	if request(caller("bob"), "delete", "acme") == authorizer.DecisionAllow || store.freshReads != before+1 {
		t.Errorf("a removed member's write past the budget: allowed, or %d fresh reads", store.freshReads-before)
	}
	if request(alice, "delete", "acme") != authorizer.DecisionAllow {
		t.Error("a member's write past the budget: refused")
	}
	if request(alice, "get", "acme") != authorizer.DecisionAllow {
		t.Error("a member's read past the budget: refused")
	}
}

// TestAgentRetiredJudgesTheNodeAsRead: an action that reads the node from
// etcd asks again whether the credential is the current agent's, as the
// authorizer may have let it past a cache behind a re-enrollment.
func TestAgentRetiredJudgesTheNodeAsRead(t *testing.T) {
	agent := &user.DefaultInfo{Name: NodeUserPrefix + "n1", Groups: []string{GroupNodes, GroupAuthenticated},
		Extra: map[string][]string{ExtraAgentGeneration: {"1"}, ExtraNodeUID: {"uid-1"}}}
	operator := &user.DefaultInfo{Name: "admin", Groups: []string{GroupAuthenticated}}
	cases := []struct {
		name string
		u    user.Info
		n    *nodusv1.Node
		ok   bool
	}{
		{"the current agent", agent, nodeAt(1), true},
		{"enrolled again", agent, nodeAt(2), false},
		{"deleted and created again", agent, recreatedAt(1), false},
		{"deleted", agent, nil, false},
		{"no agent", operator, nodeAt(7), true},
	}
	for _, tc := range cases {
		if why := AgentRetired(tc.u, tc.n); (why == "") != tc.ok {
			t.Errorf("%s: AgentRetired = %q, want current: %v", tc.name, why, tc.ok)
		}
	}
}
