package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=Cancel,verb=create,subresource=cancel,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ExecutionCancelRequest,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.Execution
// +genclient:method=Report,verb=create,subresource=report,input=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.ExecutionReport,result=github.com/nodus-dev/nodus/pkg/apis/nodus/v1.Execution
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Execution is a borrower project's workload on capacity lent in a pool.
type Execution struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is what to run and where.
	Spec ExecutionSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status is how it goes.
	// +optional
	Status ExecutionStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ExecutionSpec is a borrower's workload.
type ExecutionSpec struct {
	// Pool whose lent hosts may run it.
	Pool string `json:"pool" protobuf:"bytes,1,opt,name=pool"`
	// Command and its arguments.
	// +listType=atomic
	Command []string `json:"command" protobuf:"bytes,2,rep,name=command"`
	// Env are environment variables.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []ExecutionEnv `json:"env,omitempty" protobuf:"bytes,3,rep,name=env"`
	// GPUs wanted.
	// +optional
	GPUs int32 `json:"gpus,omitempty" protobuf:"varint,4,opt,name=gpus"`
	// MaxRuntimeSeconds ends the execution when reached.
	MaxRuntimeSeconds int64 `json:"maxRuntimeSeconds" protobuf:"varint,5,opt,name=maxRuntimeSeconds"`
	// Image, NAME[:TAG], is an OCI image the host's operator placed in the
	// host's images directory; its root replaces the host's read-only
	// system in the sandbox. An image the host does not have ends the
	// execution failed with reason ImageNotFound.
	// +optional
	Image string `json:"image,omitempty" protobuf:"bytes,6,opt,name=image"`
}

// ExecutionEnv is one environment variable.
type ExecutionEnv struct {
	Name  string `json:"name" protobuf:"bytes,1,opt,name=name"`
	Value string `json:"value" protobuf:"bytes,2,opt,name=value"`
}

// ExecutionPhase is where an execution is in its life.
type ExecutionPhase string

// Execution phases.
const (
	ExecutionPending   ExecutionPhase = "pending"
	ExecutionScheduled ExecutionPhase = "scheduled"
	ExecutionRunning   ExecutionPhase = "running"
	ExecutionSucceeded ExecutionPhase = "succeeded"
	ExecutionFailed    ExecutionPhase = "failed"
	ExecutionDrained   ExecutionPhase = "drained"
	ExecutionCancelled ExecutionPhase = "cancelled"
)

// Finished says whether an execution in this phase has ended for good.
func (p ExecutionPhase) Finished() bool {
	switch p {
	case ExecutionSucceeded, ExecutionFailed, ExecutionDrained, ExecutionCancelled:
		return true
	}
	return false
}

// ExecutionStatus reports an execution, customer-safe: never the owner or the node.
type ExecutionStatus struct {
	// Phase is pending, scheduled, running, succeeded, failed, drained or cancelled.
	// +optional
	Phase ExecutionPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=ExecutionPhase"`
	// Host is an alias of where it runs, never the owner's project or the node's name.
	// +optional
	Host string `json:"host,omitempty" protobuf:"bytes,2,opt,name=host"`
	// GPUIndices are the host's GPUs assigned to it, as NVML and nvidia-smi number them
	// on the host (PCI bus order). The execution is told them by UUID where
	// the host's driver lists UUIDs.
	// +optional
	// +listType=atomic
	GPUIndices []int32 `json:"gpuIndices,omitempty" protobuf:"varint,3,rep,name=gpuIndices"`
	// MemoryLimitMiB is the memory its sandbox may use: its share of what the
	// host's owner lends. 0 is no limit.
	// +optional
	MemoryLimitMiB int64 `json:"memoryLimitMiB,omitempty" protobuf:"varint,4,opt,name=memoryLimitMiB"`
	// MilliCPUs is the CPU time its sandbox may use, in thousandths of a CPU. 0 is no limit.
	// +optional
	MilliCPUs int64 `json:"milliCPUs,omitempty" protobuf:"varint,5,opt,name=milliCPUs"`
	// Network is what its sandbox reaches, from its pool's policy when it was placed.
	// +optional
	Network LendingNetwork `json:"network,omitempty" protobuf:"bytes,6,opt,name=network,casttype=LendingNetwork"`
	// ScheduledAt is when it was placed on a host.
	// +optional
	ScheduledAt *metav1.Time `json:"scheduledAt,omitempty" protobuf:"bytes,7,opt,name=scheduledAt"`
	// CancelRequestedAt is when a borrower asked to cancel it while it ran.
	// +optional
	CancelRequestedAt *metav1.Time `json:"cancelRequestedAt,omitempty" protobuf:"bytes,8,opt,name=cancelRequestedAt"`
	// DrainRequestedAt is when the server asked the host to stop it while
	// it ran: the owner withdrew the host, or the pool no longer lends to
	// its project (the message says which). The host's agent stops it and
	// reports it drained, whether or not it saw the withdrawal itself.
	// +optional
	DrainRequestedAt *metav1.Time `json:"drainRequestedAt,omitempty" protobuf:"bytes,14,opt,name=drainRequestedAt"`
	// StartedAt is when it started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty" protobuf:"bytes,9,opt,name=startedAt"`
	// FinishedAt is when it ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty" protobuf:"bytes,10,opt,name=finishedAt"`
	// ExitCode of the command.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty" protobuf:"varint,11,opt,name=exitCode"`
	// Reason is a machine-readable cause, such as Drained.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,12,opt,name=reason"`
	// Message says what happened.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,13,opt,name=message"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExecutionList is a list of Executions.
type ExecutionList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Execution `json:"items" protobuf:"bytes,2,rep,name=items"`
}
