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

func TestLosesSSH(t *testing.T) {
	m := func(kind nodusv1.MemberKind, name string, role nodusv1.ProjectRole) nodusv1.ProjectMember {
		return nodusv1.ProjectMember{Kind: kind, Name: name, Role: role}
	}
	alice, leads := m("", "alice", nodusv1.ProjectRoleMember), m(nodusv1.MemberKindGroup, "leads", nodusv1.ProjectRoleAdmin)
	viewer := m("", "vic", nodusv1.ProjectRoleViewer)
	before := []nodusv1.ProjectMember{alice, leads, viewer}
	for name, tc := range map[string]struct {
		after []nodusv1.ProjectMember
		loses bool
	}{
		"nothing changed":                 {before, false},
		"a member added":                  {append([]nodusv1.ProjectMember{m("", "bob", nodusv1.ProjectRoleMember)}, before...), false},
		"a member made admin":             {[]nodusv1.ProjectMember{m("", "alice", nodusv1.ProjectRoleAdmin), leads, viewer}, false},
		"the default kind written out":    {[]nodusv1.ProjectMember{m(nodusv1.MemberKindUser, "alice", nodusv1.ProjectRoleMember), leads, viewer}, false},
		"a viewer removed":                {[]nodusv1.ProjectMember{alice, leads}, false},
		"a member removed":                {[]nodusv1.ProjectMember{leads, viewer}, true},
		"a group removed":                 {[]nodusv1.ProjectMember{alice, viewer}, true},
		"a member made a viewer":          {[]nodusv1.ProjectMember{m("", "alice", nodusv1.ProjectRoleViewer), leads, viewer}, true},
		"a group entry for a user's name": {[]nodusv1.ProjectMember{m(nodusv1.MemberKindGroup, "alice", nodusv1.ProjectRoleMember), leads, viewer}, true},
		"every member removed":            {nil, true},
	} {
		if got := LosesSSH(before, tc.after); got != tc.loses {
			t.Errorf("%s: loses SSH %v, want %v", name, got, tc.loses)
		}
	}
}
