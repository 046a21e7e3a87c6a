package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator decides about the server.
	// +optional
	Spec NodeSpec `json:"spec,omitempty"`
	// Status is what the agent and the controllers observe.
	// +optional
	Status NodeStatus `json:"status,omitempty"`
}

// NodeSpec is the operator's view of a physical server.
type NodeSpec struct {
	// Pool is the capacity group the server belongs to.
	Pool string `json:"pool"`
	// ResourceClass is the scheduling class allocations ask for, e.g. "gpu-h100x8".
	ResourceClass string `json:"resourceClass"`
	// Traits are capabilities allocations may require, e.g. "CUSTOM_NVLINK".
	// +optional
	// +listType=set
	Traits []string `json:"traits,omitempty"`
	// Maintenance takes the server out of scheduling.
	// +optional
	Maintenance bool `json:"maintenance,omitempty"`
	// MaintenanceReason says why the server is in maintenance.
	// +optional
	MaintenanceReason string `json:"maintenanceReason,omitempty"`
	// LoginUser is the default operating-system account for reservations of this server.
	// +optional
	LoginUser string `json:"loginUser,omitempty"`
	// Owner is recorded as Ironic's node owner.
	// +optional
	Owner string `json:"owner,omitempty"`
	// Extra is free-form operator data, Ironic's node extra.
	// +optional
	Extra map[string]string `json:"extra,omitempty"`
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
	Inventory NodeInventory `json:"inventory,omitempty"`
	// SSHHostKey is the server's SSH host public key in authorized_keys format.
	// +optional
	SSHHostKey string `json:"sshHostKey,omitempty"`
	// SSHAddress is host:port where the server's sshd listens.
	// +optional
	SSHAddress string `json:"sshAddress,omitempty"`
	// Conditions report the server's health (Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastHeartbeatTime is the latest heartbeat of the agent.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// ProvisionState is enroll, available, active or cleaning.
	// +optional
	ProvisionState ProvisionState `json:"provisionState,omitempty"`
	// Allocation is the name of the Allocation that holds this server.
	// +optional
	Allocation string `json:"allocation,omitempty"`
	// Reservation is the one live Reservation that holds this server. The
	// reservation controller claims it by optimistic concurrency before the
	// reservation gives access, and clears it when the server's cleaning
	// starts, so no two reservations hold one server at once.
	// +optional
	Reservation string `json:"reservation,omitempty"`
	// Cleaning is the latest handover cleaning asked of the agent, and its outcome.
	// +optional
	Cleaning *NodeCleaning `json:"cleaning,omitempty"`
	// AgentGeneration increases every time the server's agent is enrolled again.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty"`
	// AppliedEpoch is the latest access epoch the agent applied.
	// +optional
	AppliedEpoch int64 `json:"appliedEpoch,omitempty"`
	// ExecutionSlots is how many borrower executions the agent runs at once,
	// each as an account of its own; 0 when they share one account.
	// +optional
	ExecutionSlots int32 `json:"executionSlots,omitempty"`
}

// NodeCleaning is one handover cleaning: what the server asked the agent to
// reset after a reservation's access ended, and what the agent reported.
type NodeCleaning struct {
	// Request numbers the cleanings of this node; every new one (a reservation
	// leaving, or an operator's `nodus nodes clean`) is one higher. Only
	// evidence for the current request counts.
	Request int64 `json:"request"`
	// Reservation is the reservation whose access ended, if any.
	// +optional
	Reservation string `json:"reservation,omitempty"`
	// Epoch is that reservation's final epoch: the agent cleans only once it
	// applied it, so that no access of the old tenant is left when it cleans.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Users are the login accounts to reset.
	// +optional
	// +listType=set
	Users []string `json:"users,omitempty"`
	// RequestedAt is when the cleaning was asked for.
	RequestedAt metav1.Time `json:"requestedAt"`
	// Phase is Pending until the current agent reports, then Succeeded or Failed.
	Phase CleaningPhase `json:"phase"`
	// CompletedAt is when the agent's evidence arrived.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// AgentGeneration is the agent generation whose evidence completed the cleaning.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty"`
	// Steps say what the agent did, in order.
	// +optional
	// +listType=atomic
	Steps []string `json:"steps,omitempty"`
	// Message says why a cleaning failed.
	// +optional
	Message string `json:"message,omitempty"`
	// CommandExitCode is the exit status of the operator's cleaning command, when one ran.
	// +optional
	CommandExitCode *int32 `json:"commandExitCode,omitempty"`
	// CommandOutput is the tail of that command's output.
	// +optional
	CommandOutput string `json:"commandOutput,omitempty"`
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
	CPU int32 `json:"cpu"`
	// DiskGiB is the host's free disk in GiB.
	DiskGiB int64 `json:"diskGiB"`
	// GPUs are the host's GPUs.
	// +optional
	// +listType=atomic
	GPUs []NodeGPU `json:"gpus,omitempty"`
	// MemoryMiB is the host's memory in MiB.
	MemoryMiB int64 `json:"memoryMiB"`
	// NodusdVersion is the nodusd release on the host.
	// +optional
	NodusdVersion string `json:"nodusdVersion,omitempty"`
	// OS is the host's operating system.
	// +optional
	OS string `json:"os,omitempty"`
}

// NodeGPU is one device on the host.
type NodeGPU struct {
	// Driver is the GPU driver version.
	// +optional
	Driver string `json:"driver,omitempty"`
	// MemoryMiB is the GPU's memory in MiB.
	MemoryMiB int64 `json:"memoryMiB"`
	// Accelerator model, "h100-sxm-80g"
	Type string `json:"type"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeList is a list of Nodes.
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Node `json:"items"`
}
