package auth

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

func TestRoleIn(t *testing.T) {
	p := &nodusv1.Project{Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{
		{Kind: nodusv1.MemberKindUser, Name: "alice", Role: nodusv1.ProjectRoleViewer},
		{Kind: nodusv1.MemberKindGroup, Name: "leads", Role: nodusv1.ProjectRoleAdmin},
		{Kind: nodusv1.MemberKindGroup, Name: "alice", Role: nodusv1.ProjectRoleMember},
	}}}
	cases := map[string]struct {
		user   user.Info
		role   nodusv1.ProjectRole
		member bool
	}{
		"user entry":                       {&user.DefaultInfo{Name: "alice"}, nodusv1.ProjectRoleViewer, true},
		"strongest of user and group":      {&user.DefaultInfo{Name: "alice", Groups: []string{"leads"}}, nodusv1.ProjectRoleAdmin, true},
		"a group named like a user":        {&user.DefaultInfo{Name: "bob", Groups: []string{"alice"}}, nodusv1.ProjectRoleMember, true},
		"a user named like a group is not": {&user.DefaultInfo{Name: "leads"}, "", false},
		"stranger":                         {&user.DefaultInfo{Name: "eve", Groups: []string{GroupAuthenticated}}, "", false},
	}
	for name, tc := range cases {
		role, member := RoleIn(p, tc.user)
		if role != tc.role || member != tc.member {
			t.Errorf("%s: got %q %v, want %q %v", name, role, member, tc.role, tc.member)
		}
	}
	if !Allows(nodusv1.ProjectRoleAdmin, nodusv1.ProjectRoleViewer) || Allows(nodusv1.ProjectRoleViewer, nodusv1.ProjectRoleMember) {
		t.Error("role order must be viewer < member < admin")
	}
}
