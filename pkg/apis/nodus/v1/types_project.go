package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Project is a customer project. Its name is also the namespace that holds the
// project's ReservedHosts, so it follows the DNS-label rules of namespaces.
type Project struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec says who belongs to the project and with which role.
	// +optional
	Spec ProjectSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// Status is what the server records of the project; clients do not set it.
	// +optional
	Status ProjectStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ProjectStatus is what the server records of a project.
type ProjectStatus struct {
	// AccessRevision rises every time an update of the members takes SSH
	// access away from someone: a member removed, or made a viewer. The
	// project's active reservations then raise their epoch, so that no
	// certificate issued before opens a host.
	// +optional
	AccessRevision int64 `json:"accessRevision,omitempty" protobuf:"varint,1,opt,name=accessRevision"`
}

// ProjectSpec is the membership of a project.
type ProjectSpec struct {
	// DisplayName is a human-readable name for the project.
	// +optional
	DisplayName string `json:"displayName,omitempty" protobuf:"bytes,1,opt,name=displayName"`
	// Members are the users and groups that may use the project, each with a role.
	// +optional
	// +listType=atomic
	Members []ProjectMember `json:"members,omitempty" protobuf:"bytes,2,rep,name=members"`
}

// MemberKind says whether a member entry names a user or a group.
type MemberKind string

const (
	// MemberKindUser names one authenticated user.
	MemberKindUser MemberKind = "User"
	// MemberKindGroup names every user of an authenticated group.
	MemberKindGroup MemberKind = "Group"
)

// ProjectRole is what a member may do in its project.
type ProjectRole string

const (
	// ProjectRoleViewer reads the project's objects.
	ProjectRoleViewer ProjectRole = "viewer"
	// ProjectRoleMember also gets SSH access to the project's hosts and runs executions.
	ProjectRoleMember ProjectRole = "member"
	// ProjectRoleAdmin also releases and lends the project's hosts.
	ProjectRoleAdmin ProjectRole = "admin"
)

// ProjectMember grants a role in a project to a user or a group.
type ProjectMember struct {
	// Kind is User or Group. Defaults to User.
	// +optional
	Kind MemberKind `json:"kind,omitempty" protobuf:"bytes,1,opt,name=kind,casttype=MemberKind"`
	// Name is the user name or group name as the server authenticates it.
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
	// Role is admin, member or viewer.
	Role ProjectRole `json:"role" protobuf:"bytes,3,opt,name=role,casttype=ProjectRole"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ProjectList is a list of Projects.
type ProjectList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Project `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Pool is an enrolled capacity group: one supplier's fleet in one place.
type Pool struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec describes the pool.
	// +optional
	Spec PoolSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
}

// PoolSpec describes a capacity group.
type PoolSpec struct {
	// DisplayName is a human-readable name for the pool.
	// +optional
	DisplayName string `json:"displayName,omitempty" protobuf:"bytes,1,opt,name=displayName"`
	// Supplier is the organisation that owns the machines.
	// +optional
	Supplier string `json:"supplier,omitempty" protobuf:"bytes,2,opt,name=supplier"`
	// Location is where the machines are, for example a site or region name.
	// +optional
	Location string `json:"location,omitempty" protobuf:"bytes,3,opt,name=location"`
	// Lending says whether owners may lend idle hosts of this pool to other
	// projects, and which projects may borrow how much.
	// +optional
	Lending *PoolLending `json:"lending,omitempty" protobuf:"bytes,4,opt,name=lending"`
}

// PoolLending is a pool's lending policy, after Kueue's borrowing limits.
type PoolLending struct {
	// Open lets owners lend hosts of this pool.
	// +optional
	Open bool `json:"open,omitempty" protobuf:"varint,1,opt,name=open"`
	// Borrowers are the projects that may run executions on lent hosts.
	// +optional
	// +listType=map
	// +listMapKey=project
	Borrowers []PoolBorrower `json:"borrowers,omitempty" protobuf:"bytes,2,rep,name=borrowers"`
	// ShowBorrowers lets owners see which projects borrow their hosts.
	// +optional
	ShowBorrowers bool `json:"showBorrowers,omitempty" protobuf:"varint,3,opt,name=showBorrowers"`
	// Network is what borrowers' executions reach: "none" (the default:
	// nothing, not even the host) or "egress" (the internet through a
	// user-mode network stack, never the host, its loopback or private
	// networks).
	// +optional
	Network LendingNetwork `json:"network,omitempty" protobuf:"bytes,4,opt,name=network,casttype=LendingNetwork"`
}

// LendingNetwork is the network policy of borrowers' executions.
type LendingNetwork string

const (
	// LendingNetworkNone: an execution has only its own loopback.
	LendingNetworkNone LendingNetwork = "none"
	// LendingNetworkEgress: an execution reaches public addresses, nothing of the host or private networks.
	LendingNetworkEgress LendingNetwork = "egress"
)

// PoolBorrower is one project allowed to borrow, with its caps.
type PoolBorrower struct {
	// Project is the borrowing project.
	Project string `json:"project" protobuf:"bytes,1,opt,name=project"`
	// MaxGPUs caps the GPUs the project borrows at once in this pool.
	MaxGPUs int32 `json:"maxGPUs" protobuf:"varint,2,opt,name=maxGPUs"`
	// MaxExecutions, when set, caps the executions the project has placed
	// at once in this pool (scheduled or running), with GPUs or without:
	// executions without GPUs count against no GPU cap, and could otherwise
	// take every execution slot of the pool's lent hosts. Unset, only the
	// hosts' slots bound them.
	// +optional
	MaxExecutions *int32 `json:"maxExecutions,omitempty" protobuf:"varint,3,opt,name=maxExecutions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PoolList is a list of Pools.
type PoolList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Pool `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// AnnotationRetireReservations on a Project lets its deletion retire its live
// reservations (each as a deleted reservation is: access retired, the node
// cleaned). Without it, deleting a project with live reservations is refused.
const AnnotationRetireReservations = "nodus.dev/retire-reservations"
