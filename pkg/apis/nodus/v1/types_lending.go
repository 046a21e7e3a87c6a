package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReservationLending is the owner's lending agreement for a reserved host:
// while Lent and the reservation is active, the scheduler may place
// borrowers' executions on the host, within the caps.
type ReservationLending struct {
	// Lent says the owner lends the host now; false after a withdrawal.
	Lent bool `json:"lent" protobuf:"varint,1,opt,name=lent"`
	// MaxGPUs is the most GPUs borrowers use on the host at once.
	MaxGPUs int32 `json:"maxGPUs" protobuf:"varint,2,opt,name=maxGPUs"`
	// MaxExecutions is the most borrower executions on the host at once.
	MaxExecutions int32 `json:"maxExecutions" protobuf:"varint,3,opt,name=maxExecutions"`
	// MemoryMiB is the memory borrowers' executions use at most, together;
	// each gets its share (by GPUs, or by executions when it has none).
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty" protobuf:"varint,4,opt,name=memoryMiB"`
	// MilliCPUs is the CPU time borrowers' executions use at most,
	// together, in thousandths of a CPU; shared as memory is.
	// +optional
	MilliCPUs int64 `json:"milliCPUs,omitempty" protobuf:"varint,5,opt,name=milliCPUs"`
	// Epoch is the reservation epoch the owner reviewed when it last lent or withdrew.
	Epoch int64 `json:"epoch" protobuf:"varint,6,opt,name=epoch"`
	// ChangedAt is when the owner last lent or withdrew.
	ChangedAt metav1.Time `json:"changedAt" protobuf:"bytes,7,opt,name=changedAt"`
}

// +genclient
// +genclient:onlyVerbs=get,list,watch,create,update,patch,delete,updateStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// HostLending is the owner's view of how its ReservedHost of the same name is
// lent: what it agreed to lend and how much of it is borrowed now. It is
// written by Nodus only; owners change it through the ReservedHost's lend and
// withdraw actions.
type HostLending struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Status is the lending agreement and its use.
	// +optional
	Status HostLendingStatus `json:"status,omitempty" protobuf:"bytes,2,opt,name=status"`
}

// HostLendingState says whether borrowers may use the host.
type HostLendingState string

const (
	// HostLendingLent: borrowers' executions may be placed on the host.
	HostLendingLent HostLendingState = "lent"
	// HostLendingWithdrawn: the owner withdrew; running executions drain.
	HostLendingWithdrawn HostLendingState = "withdrawn"
	// HostLendingEnded: the reservation was released or its term ended; lending drained with it.
	HostLendingEnded HostLendingState = "ended"
)

// HostLendingStatus is a host's lending agreement and its use.
type HostLendingStatus struct {
	// State is lent, withdrawn or ended.
	State HostLendingState `json:"state" protobuf:"bytes,1,opt,name=state,casttype=HostLendingState"`
	// Pool is the pool the host is lent into.
	// +optional
	Pool string `json:"pool,omitempty" protobuf:"bytes,2,opt,name=pool"`
	// Epoch is the reservation epoch the owner reviewed when it last lent or withdrew.
	Epoch int64 `json:"epoch" protobuf:"varint,3,opt,name=epoch"`
	// MaxGPUs is the most GPUs borrowers use at once.
	MaxGPUs int32 `json:"maxGPUs" protobuf:"varint,4,opt,name=maxGPUs"`
	// MaxExecutions is the most borrower executions at once.
	MaxExecutions int32 `json:"maxExecutions" protobuf:"varint,5,opt,name=maxExecutions"`
	// MemoryMiB is the memory lent to borrowers' executions, together.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty" protobuf:"varint,6,opt,name=memoryMiB"`
	// MilliCPUs is the CPU time lent to borrowers' executions, together, in thousandths of a CPU.
	// +optional
	MilliCPUs int64 `json:"milliCPUs,omitempty" protobuf:"varint,7,opt,name=milliCPUs"`
	// BorrowedGPUs is how many GPUs borrowers hold now.
	BorrowedGPUs int32 `json:"borrowedGPUs" protobuf:"varint,8,opt,name=borrowedGPUs"`
	// GPUIndices are the host's GPUs borrowers hold now, as nvidia-smi numbers
	// them (with CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA too): the owner's own work should use the others.
	// +optional
	// +listType=atomic
	GPUIndices []int32 `json:"gpuIndices,omitempty" protobuf:"varint,9,rep,name=gpuIndices"`
	// Executions is how many borrower executions are scheduled or running now.
	Executions int32 `json:"executions" protobuf:"varint,10,opt,name=executions"`
	// Borrowers names who borrows, only where the pool shows borrowers to owners.
	// +optional
	// +listType=map
	// +listMapKey=project
	Borrowers []HostBorrower `json:"borrowers,omitempty" protobuf:"bytes,11,rep,name=borrowers"`
	// ChangedAt is when the owner last lent or withdrew.
	ChangedAt metav1.Time `json:"changedAt" protobuf:"bytes,12,opt,name=changedAt"`
}

// HostBorrower is one borrowing project's use of a host.
type HostBorrower struct {
	// Project is the borrowing project.
	Project string `json:"project" protobuf:"bytes,1,opt,name=project"`
	// GPUs it holds on the host.
	GPUs int32 `json:"gpus" protobuf:"varint,2,opt,name=gpus"`
	// Executions it has scheduled or running on the host.
	Executions int32 `json:"executions" protobuf:"varint,3,opt,name=executions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// HostLendingList is a list of HostLendings.
type HostLendingList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []HostLending `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostLendRequest is POSTed to reservedhosts/{name}/lend by an owner
// admin: lend the host into its pool, or change the caps of a lent host.
// The answer is the host's HostLending.
type ReservedHostLendRequest struct {
	metav1.TypeMeta `json:",inline"`

	// Epoch identifies the reservation assignment the owner reviewed.
	// +required
	Epoch *int64 `json:"epoch" protobuf:"varint,1,opt,name=epoch"`
	// MaxGPUs caps the GPUs borrowers use at once; default all of the host's GPUs.
	// +optional
	MaxGPUs *int32 `json:"maxGPUs,omitempty" protobuf:"varint,2,opt,name=maxGPUs"`
	// MaxExecutions caps the executions at once; default one per lent GPU, at least one.
	// +optional
	MaxExecutions *int32 `json:"maxExecutions,omitempty" protobuf:"varint,3,opt,name=maxExecutions"`
	// MemoryMiB caps the memory of borrowers' executions together; default
	// the host's memory in proportion to the GPUs lent (counting at least one).
	// +optional
	MemoryMiB *int64 `json:"memoryMiB,omitempty" protobuf:"varint,4,opt,name=memoryMiB"`
	// MilliCPUs caps their CPU time together, in thousandths of a CPU;
	// default the host's CPUs in the same proportion.
	// +optional
	MilliCPUs *int64 `json:"milliCPUs,omitempty" protobuf:"varint,5,opt,name=milliCPUs"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostWithdrawRequest is POSTed to reservedhosts/{name}/withdraw by an
// owner admin: stop lending; borrowers' executions on the host drain.
type ReservedHostWithdrawRequest struct {
	metav1.TypeMeta `json:",inline"`

	// Epoch identifies the reservation assignment the owner reviewed.
	// +required
	Epoch *int64 `json:"epoch" protobuf:"varint,1,opt,name=epoch"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExecutionCancelRequest is POSTed to executions/{name}/cancel by a borrower
// member. A pending or scheduled execution ends as cancelled at once; a
// running one is stopped by its host's agent (TERM, grace period, KILL).
// The record is kept.
type ExecutionCancelRequest struct {
	metav1.TypeMeta `json:",inline"`
	// UID, when set, cancels the execution only while it is that object:
	// one deleted and made again under its name since is not cancelled
	// (404).
	// +optional
	UID types.UID `json:"uid,omitempty" protobuf:"bytes,1,opt,name=uid,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExecutionReport is POSTed to executions/{name}/report by the agent of the
// host the execution was placed on: the phase it reached and the bounded
// tail of its output.
type ExecutionReport struct {
	metav1.TypeMeta `json:",inline"`

	// Phase is running, succeeded, failed, drained or cancelled.
	Phase ExecutionPhase `json:"phase" protobuf:"bytes,1,opt,name=phase,casttype=ExecutionPhase"`
	// ExitCode of the command, when it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty" protobuf:"varint,2,opt,name=exitCode"`
	// Reason is a machine-readable cause.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,3,opt,name=reason"`
	// Message says what happened.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,4,opt,name=message"`
	// Log is the tail of the execution's output so far, at most MaxExecutionLogBytes.
	// +optional
	Log string `json:"log,omitempty" protobuf:"bytes,5,opt,name=log"`
	// LogDroppedBytes is how much output before Log was dropped.
	// +optional
	LogDroppedBytes int64 `json:"logDroppedBytes,omitempty" protobuf:"varint,6,opt,name=logDroppedBytes"`
	// UID is the execution's metadata.uid: a report is about that
	// execution only, not another made since under its name (404). Empty,
	// as agents before it send, the report is about the execution of the
	// name.
	// +optional
	UID types.UID `json:"uid,omitempty" protobuf:"bytes,7,opt,name=uid,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// MaxExecutionLogBytes bounds the output kept of one execution.
const MaxExecutionLogBytes = 256 << 10
