package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationDeleteUncleaned on a Node lets it be deleted while it still owes
// a cleaning (a reservation holds it, its cleaning is pending or failed):
// the operator's word that the machine is re-imaged, or gone for good,
// before it is enrolled again. A Node enrolled anew owes nothing, so
// without it such a deletion is refused.
const AnnotationDeleteUncleaned = "nodus.dev/delete-uncleaned"

// +genclient
// +genclient:nonNamespaced
// +genclient:method=Enroll,verb=create,subresource=enroll,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeEnrollment,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeEnrollment
// +genclient:method=Renew,verb=create,subresource=renew,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeEnrollment,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeEnrollment
// +genclient:method=Heartbeat,verb=create,subresource=heartbeat,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeHeartbeat,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeHeartbeat
// +genclient:method=Clean,verb=create,subresource=clean,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.NodeCleanRequest,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.Node
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Node is one physical server, created by enrollment of its nodusd agent.
type Node struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is what the operator decides about the server.
	// +optional
	Spec NodeSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// Status is what the agent and the controllers observe.
	// +optional
	Status NodeStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// NodeSpec is the operator's view of a physical server.
type NodeSpec struct {
	// Pool is the capacity group the server belongs to.
	Pool string `json:"pool" protobuf:"bytes,1,opt,name=pool"`
	// ResourceClass is the scheduling class allocations ask for, e.g. "gpu-h100x8".
	ResourceClass string `json:"resourceClass" protobuf:"bytes,2,opt,name=resourceClass"`
	// Traits are capabilities allocations may require, e.g. "CUSTOM_NVLINK".
	// +optional
	// +listType=set
	Traits []string `json:"traits,omitempty" protobuf:"bytes,3,rep,name=traits"`
	// Maintenance takes the server out of scheduling.
	// +optional
	Maintenance bool `json:"maintenance,omitempty" protobuf:"varint,4,opt,name=maintenance"`
	// MaintenanceReason says why the server is in maintenance.
	// +optional
	MaintenanceReason string `json:"maintenanceReason,omitempty" protobuf:"bytes,5,opt,name=maintenanceReason"`
	// LoginUser is the default operating-system account for reservations of this server.
	// +optional
	LoginUser string `json:"loginUser,omitempty" protobuf:"bytes,6,opt,name=loginUser"`
	// Owner is recorded as Ironic's node owner.
	// +optional
	Owner string `json:"owner,omitempty" protobuf:"bytes,7,opt,name=owner"`
	// Extra is free-form operator data, Ironic's node extra.
	// +optional
	Extra map[string]string `json:"extra,omitempty" protobuf:"bytes,8,rep,name=extra"`
}

// ProvisionState is the Ironic-style lifecycle state of a node.
type ProvisionState string

const (
	// ProvisionStateEnroll: registered, the agent has not reported yet.
	ProvisionStateEnroll ProvisionState = "enroll"
	// ProvisionStateAvailable: ready to be allocated.
	ProvisionStateAvailable ProvisionState = "available"
	// ProvisionStateActive: allocated and in use.
	ProvisionStateActive ProvisionState = "active"
	// ProvisionStateCleaning: a reservation's access ended; the agent resets
	// the login account (and runs the operator's cleaning command) before the
	// node is available to the next tenant.
	ProvisionStateCleaning ProvisionState = "cleaning"
)

// NodeConditionReady is the condition type set while the agent heartbeats on time.
const NodeConditionReady = "Ready"

// NodeStatus is what is observed about a physical server.
type NodeStatus struct {
	// Inventory is the server's hardware and software as the agent reports it.
	// +optional
	Inventory NodeInventory `json:"inventory,omitempty" protobuf:"bytes,1,opt,name=inventory"`
	// SSHHostKey is the server's SSH host public key in authorized_keys format.
	// +optional
	SSHHostKey string `json:"sshHostKey,omitempty" protobuf:"bytes,2,opt,name=sshHostKey"`
	// SSHAddress is host:port where the server's sshd listens.
	// +optional
	SSHAddress string `json:"sshAddress,omitempty" protobuf:"bytes,3,opt,name=sshAddress"`
	// Conditions report the server's health (Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,4,rep,name=conditions"`
	// LastHeartbeatTime is the latest heartbeat of the agent the server
	// recorded: the beat that last changed the node (it became ready,
	// applied an epoch, reported a refusal or a cleaning) or, once the
	// node's lease expired, the last beat a server replica heard before.
	// A ready node's beats that change nothing do not write it: the Ready
	// condition says whether the agent beats.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty" protobuf:"bytes,5,opt,name=lastHeartbeatTime"`
	// ProvisionState is enroll, available, active or cleaning.
	// +optional
	ProvisionState ProvisionState `json:"provisionState,omitempty" protobuf:"bytes,6,opt,name=provisionState,casttype=ProvisionState"`
	// Allocation is the name of the Allocation that holds this server.
	// +optional
	Allocation string `json:"allocation,omitempty" protobuf:"bytes,7,opt,name=allocation"`
	// AllocationUID is the UID of the Allocation that holds this server, set
	// with Allocation: an allocation deleted and made again under its name
	// is another one, which never takes over the first one's server.
	// +optional
	AllocationUID types.UID `json:"allocationUID,omitempty" protobuf:"bytes,14,opt,name=allocationUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// Reservation is the one live Reservation that holds this server. The
	// reservation controller claims it by optimistic concurrency before the
	// reservation gives access, and clears it when the server's cleaning
	// starts, so no two reservations hold one server at once.
	// +optional
	Reservation string `json:"reservation,omitempty" protobuf:"bytes,8,opt,name=reservation"`
	// ReservationUID is the UID of the reservation that holds this server,
	// set with Reservation: a reservation deleted and made again under its
	// name is another one, whose access begins only after the server's
	// cleaning of the first.
	// +optional
	ReservationUID types.UID `json:"reservationUID,omitempty" protobuf:"bytes,13,opt,name=reservationUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// Cleaning is the latest handover cleaning asked of the agent, and its outcome.
	// +optional
	Cleaning *NodeCleaning `json:"cleaning,omitempty" protobuf:"bytes,9,opt,name=cleaning"`
	// AgentGeneration increases every time the server's agent is enrolled again.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty" protobuf:"varint,10,opt,name=agentGeneration"`
	// AppliedEpoch is the latest access epoch the agent applied.
	// +optional
	AppliedEpoch int64 `json:"appliedEpoch,omitempty" protobuf:"varint,11,opt,name=appliedEpoch"`
	// ExecutionSlots is how many borrower executions the agent runs at once,
	// each as an account of its own; 0 when they share one account.
	// +optional
	ExecutionSlots int32 `json:"executionSlots,omitempty" protobuf:"varint,12,opt,name=executionSlots"`
	// AccessRefusal is the agent's last word on a reservation on this
	// server whose access it does not grant, from its heartbeats; gone once
	// it grants it or no longer reports it.
	// +optional
	AccessRefusal *AccessRefusal `json:"accessRefusal,omitempty" protobuf:"bytes,15,opt,name=accessRefusal"`
}

// AccessRefusal is why a node's agent does not grant a reservation's access.
type AccessRefusal struct {
	// Reservation is the reservation's name.
	Reservation string `json:"reservation" protobuf:"bytes,1,opt,name=reservation"`
	// ReservationUID is the UID of the reservation the server judged the
	// refusal against: one deleted and made again under its name is
	// another, which the refusal is not about.
	ReservationUID types.UID `json:"reservationUID" protobuf:"bytes,4,opt,name=reservationUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// Epoch is the reservation's epoch whose access the agent refused.
	Epoch int64 `json:"epoch" protobuf:"varint,2,opt,name=epoch"`
	// Message is the agent's reason, one line.
	Message string `json:"message" protobuf:"bytes,3,opt,name=message"`
}

// NodeCleaning is one handover cleaning: what the server asked the agent to
// reset after a reservation's access ended, and what the agent reported.
// When the next reservation claims the node, a succeeded cleaning keeps
// its request, times, phase, agent generation and exit code only: the rest
// names the tenant before, and the next one can read its node (the server
// logs the report in full).
type NodeCleaning struct {
	// Request numbers the cleanings of this node; every new one (a reservation
	// leaving, or an operator's `nodus nodes clean`) is one higher. Only
	// evidence for the current request counts.
	Request int64 `json:"request" protobuf:"varint,1,opt,name=request"`
	// Reservation is the reservation whose access ended, if any.
	// +optional
	Reservation string `json:"reservation,omitempty" protobuf:"bytes,2,opt,name=reservation"`
	// Epoch is that reservation's final epoch: the agent cleans only once it
	// applied it, so that no access of the old tenant is left when it cleans.
	// +optional
	Epoch int64 `json:"epoch,omitempty" protobuf:"varint,3,opt,name=epoch"`
	// Users are the login accounts to reset.
	// +optional
	// +listType=set
	Users []string `json:"users,omitempty" protobuf:"bytes,4,rep,name=users"`
	// RequestedAt is when the cleaning was asked for.
	RequestedAt metav1.Time `json:"requestedAt" protobuf:"bytes,5,opt,name=requestedAt"`
	// Phase is Pending until the current agent reports, then Succeeded or Failed.
	Phase CleaningPhase `json:"phase" protobuf:"bytes,6,opt,name=phase,casttype=CleaningPhase"`
	// CompletedAt is when the agent's evidence arrived.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty" protobuf:"bytes,7,opt,name=completedAt"`
	// AgentGeneration is the agent generation whose evidence completed the cleaning.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty" protobuf:"varint,8,opt,name=agentGeneration"`
	// Steps say what the agent did, in order.
	// +optional
	// +listType=atomic
	Steps []string `json:"steps,omitempty" protobuf:"bytes,9,rep,name=steps"`
	// Message says why a cleaning failed.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,10,opt,name=message"`
	// CommandExitCode is the exit status of the operator's cleaning command, when one ran.
	// +optional
	CommandExitCode *int32 `json:"commandExitCode,omitempty" protobuf:"varint,11,opt,name=commandExitCode"`
	// CommandOutput is the tail of that command's output.
	// +optional
	CommandOutput string `json:"commandOutput,omitempty" protobuf:"bytes,12,opt,name=commandOutput"`
	// ReservationUID is the UID of the reservation whose access ended, when
	// its claim named one: the agent records it with the retirement, so that
	// a reservation made again under the name, which it never applied, is
	// told from the one it follows.
	// +optional
	ReservationUID types.UID `json:"reservationUID,omitempty" protobuf:"bytes,13,opt,name=reservationUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// CleaningPhase is the progress of a handover cleaning.
type CleaningPhase string

const (
	// CleaningPending: asked for, no evidence yet.
	CleaningPending CleaningPhase = "Pending"
	// CleaningSucceeded: the current agent reset everything; the node is available.
	CleaningSucceeded CleaningPhase = "Succeeded"
	// CleaningFailed: something could not be reset; the node went into maintenance.
	CleaningFailed CleaningPhase = "Failed"
)

// NodeInventory is the host's hardware and software.
type NodeInventory struct {
	// CPU is the host's CPU count.
	CPU int32 `json:"cpu" protobuf:"varint,1,opt,name=cpu"`
	// DiskGiB is the host's free disk in GiB.
	DiskGiB int64 `json:"diskGiB" protobuf:"varint,2,opt,name=diskGiB"`
	// GPUs are the host's GPUs.
	// +optional
	// +listType=atomic
	GPUs []NodeGPU `json:"gpus,omitempty" protobuf:"bytes,3,rep,name=gpus"`
	// MemoryMiB is the host's memory in MiB.
	MemoryMiB int64 `json:"memoryMiB" protobuf:"varint,4,opt,name=memoryMiB"`
	// NodusdVersion is the nodusd release on the host.
	// +optional
	NodusdVersion string `json:"nodusdVersion,omitempty" protobuf:"bytes,5,opt,name=nodusdVersion"`
	// OS is the host's operating system.
	// +optional
	OS string `json:"os,omitempty" protobuf:"bytes,6,opt,name=os"`
}

// NodeGPU is one device on the host.
type NodeGPU struct {
	// Driver is the GPU driver version.
	// +optional
	Driver string `json:"driver,omitempty" protobuf:"bytes,1,opt,name=driver"`
	// MemoryMiB is the GPU's memory in MiB.
	MemoryMiB int64 `json:"memoryMiB" protobuf:"varint,2,opt,name=memoryMiB"`
	// Accelerator model, "h100-sxm-80g"
	Type string `json:"type" protobuf:"bytes,3,opt,name=type"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeList is a list of Nodes.
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Node `json:"items" protobuf:"bytes,2,rep,name=items"`
}
