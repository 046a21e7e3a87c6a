package v1

// SetDefaults_ProjectMember makes a member entry without a kind name a user.
func SetDefaults_ProjectMember(obj *ProjectMember) {
	if obj.Kind == "" {
		obj.Kind = MemberKindUser
	}
}

// SetDefaults_Node puts a newly registered node in the enroll state.
func SetDefaults_NodeStatus(obj *NodeStatus) {
	if obj.ProvisionState == "" {
		obj.ProvisionState = ProvisionStateEnroll
	}
}
