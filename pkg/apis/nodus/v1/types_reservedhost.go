package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:onlyVerbs=get,list,watch,create,update,patch,delete,updateStatus
// +genclient:method=ReleaseCapacity,verb=create,subresource=release-capacity,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHostReleaseRequest,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHost
// +genclient:method=SSHCertificate,verb=create,subresource=ssh-certificate,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHostSSHCertificate,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHostSSHCertificate
// +genclient:method=Lend,verb=create,subresource=lend,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHostLendRequest,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.HostLending
// +genclient:method=Withdraw,verb=create,subresource=withdraw,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ReservedHostWithdrawRequest,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.HostLending
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHost is a project-scoped physical server assignment (Beta). Operators assign the entire machine; customer connections never create or replace capacity.
type ReservedHost struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// ReservedHostStatus is the customer-safe view of a physical host assignment.
	// +required
	Status ReservedHostStatus `json:"status" protobuf:"bytes,2,opt,name=status"`
}

// ReservedHostStatus is the customer-safe view of a physical host assignment.
type ReservedHostStatus struct {
	// Conditions reports host connectivity and reservation eligibility.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,1,rep,name=conditions"`
	// ReservedHostConnect describes access to the physical operating system through Nodus.
	// +optional
	Connect *ReservedHostConnect `json:"connect,omitempty" protobuf:"bytes,2,opt,name=connect"`
	// NodeInventory is the host’s hardware and software.
	// +required
	Inventory NodeInventory `json:"inventory" protobuf:"bytes,3,opt,name=inventory"`
	// LastHeartbeatTime is the latest host heartbeat, as its node records
	// it: that of the host's last change, or its last before it stopped
	// beating. The Connected condition says whether the host's agent beats.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty" protobuf:"bytes,4,opt,name=lastHeartbeatTime"`
	// Pool is the enrolled capacity group used for this host’s lending agreement.
	// +optional
	Pool string `json:"pool,omitempty" protobuf:"bytes,5,opt,name=pool"`
	// ReservedHostReleaseStatus reports execution drainage, never early contract cancellation or disk sanitization.
	// +optional
	Release *ReservedHostReleaseStatus `json:"release,omitempty" protobuf:"bytes,6,opt,name=release"`
	// HostReservation is the customer-safe projection of the physical server’s assignment (Beta).
	// +required
	Reservation HostReservation `json:"reservation" protobuf:"bytes,7,opt,name=reservation"`
}

// ReservedHostConnect describes access to the physical operating system through Nodus.
type ReservedHostConnect struct {
	// Command sets up SSH and opens a shell on this host.
	Command string `json:"command" protobuf:"bytes,1,opt,name=command"`
	// Host is the stable SSH alias installed by the Nodus CLI.
	Host string `json:"host" protobuf:"bytes,2,opt,name=host"`
	// HostKey is the public SSH host key used for strict host verification.
	HostKey string `json:"hostKey" protobuf:"bytes,3,opt,name=hostKey"`
	// LoginUser is the operator-configured operating-system account.
	LoginUser string `json:"loginUser" protobuf:"bytes,4,opt,name=loginUser"`
}

// ReservedHostReleaseStatus reports execution drainage, never early contract cancellation or disk sanitization.
type ReservedHostReleaseStatus struct {
	// DrainedAt is when current-agent evidence confirmed that owner and borrower execution had ended.
	// +optional
	DrainedAt *metav1.Time `json:"drainedAt,omitempty" protobuf:"bytes,1,opt,name=drainedAt"`
	// RequestedAt is when the owner requested retirement of access and execution.
	RequestedAt metav1.Time `json:"requestedAt" protobuf:"bytes,2,opt,name=requestedAt"`
}

// HostReservation is the customer-safe projection of the physical server’s assignment (Beta).
type HostReservation struct {
	// EndsAt is the exclusive end of the reservation term.
	EndsAt metav1.Time `json:"endsAt" protobuf:"bytes,1,opt,name=endsAt"`
	// Epoch fences connections after access changes.
	Epoch int64 `json:"epoch" protobuf:"varint,2,opt,name=epoch"`
	// LoginUser is the fixed operating-system account.
	LoginUser string `json:"loginUser" protobuf:"bytes,3,opt,name=loginUser"`
	// Project identifies the customer project authorized to connect.
	Project string `json:"project" protobuf:"bytes,4,opt,name=project"`
	// StartsAt is the beginning of the reservation term.
	StartsAt metav1.Time `json:"startsAt" protobuf:"bytes,5,opt,name=startsAt"`
	// State controls access, never hardware availability to other workloads.
	State ReservationState `json:"state" protobuf:"bytes,6,opt,name=state,casttype=ReservationState"`
}

// Condition types of a ReservedHost.
const (
	// ReservedHostConditionConnected: a fresh heartbeat from the current agent at the current epoch.
	ReservedHostConditionConnected = "Connected"
	// ReservedHostConditionEligible: within the term and not released.
	ReservedHostConditionEligible = "Eligible"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostList is a list of ReservedHosts.
type ReservedHostList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []ReservedHost `json:"items" protobuf:"bytes,2,rep,name=items"`
}
