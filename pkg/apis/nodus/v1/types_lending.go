package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ReservationLending is the owner's lending agreement for a reserved host:
// while Lent and the reservation is active, the scheduler may place
// borrowers' executions on the host, within the caps.
type ReservationLending struct {
	// Lent says the owner lends the host now; false after a withdrawal.
	Lent bool `json:"lent"`
	// MaxGPUs is the most GPUs borrowers use on the host at once.
	MaxGPUs int32 `json:"maxGPUs"`
	// MaxExecutions is the most borrower executions on the host at once.
	MaxExecutions int32 `json:"maxExecutions"`
	// MemoryMiB is the memory borrowers' executions use at most, together;
	// each gets its share (by GPUs, or by executions when it has none).
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MilliCPUs is the CPU time borrowers' executions use at most,
	// together, in thousandths of a CPU; shared as memory is.
	// +optional
	MilliCPUs int64 `json:"milliCPUs,omitempty"`
	// Epoch is the reservation epoch the owner reviewed when it last lent or withdrew.
	Epoch int64 `json:"epoch"`
	// ChangedAt is when the owner last lent or withdrew.
	ChangedAt metav1.Time `json:"changedAt"`
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
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the lending agreement and its use.
	// +optional
	Status HostLendingStatus `json:"status,omitempty"`
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
	State HostLendingState `json:"state"`
	// Pool is the pool the host is lent into.
	// +optional
	Pool string `json:"pool,omitempty"`
	// Epoch is the reservation epoch the owner reviewed when it last lent or withdrew.
	Epoch int64 `json:"epoch"`
	// MaxGPUs is the most GPUs borrowers use at once.
	MaxGPUs int32 `json:"maxGPUs"`
	// MaxExecutions is the most borrower executions at once.
	MaxExecutions int32 `json:"maxExecutions"`
	// MemoryMiB is the memory lent to borrowers' executions, together.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MilliCPUs is the CPU time lent to borrowers' executions, together, in thousandths of a CPU.
	// +optional
	MilliCPUs int64 `json:"milliCPUs,omitempty"`
	// BorrowedGPUs is how many GPUs borrowers hold now.
	BorrowedGPUs int32 `json:"borrowedGPUs"`
	// GPUIndices are the host's GPUs borrowers hold now, as nvidia-smi and
	// CUDA_VISIBLE_DEVICES number them: the owner's own work should use the others.
	// +optional
	// +listType=atomic
	GPUIndices []int32 `json:"gpuIndices,omitempty"`
	// Executions is how many borrower executions are scheduled or running now.
	Executions int32 `json:"executions"`
	// Borrowers names who borrows, only where the pool shows borrowers to owners.
	// +optional
	// +listType=map
	// +listMapKey=project
	Borrowers []HostBorrower `json:"borrowers,omitempty"`
	// ChangedAt is when the owner last lent or withdrew.
	ChangedAt metav1.Time `json:"changedAt"`
}

// HostBorrower is one borrowing project's use of a host.
type HostBorrower struct {
	// Project is the borrowing project.
	Project string `json:"project"`
	// GPUs it holds on the host.
	GPUs int32 `json:"gpus"`
	// Executions it has scheduled or running on the host.
	Executions int32 `json:"executions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// HostLendingList is a list of HostLendings.
type HostLendingList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HostLending `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostLendRequest is POSTed to reservedhosts/{name}/lend by an owner
// admin: lend the host into its pool, or change the caps of a lent host.
// The answer is the host's HostLending.
type ReservedHostLendRequest struct {
	metav1.TypeMeta `json:",inline"`

	// Epoch identifies the reservation assignment the owner reviewed.
	// +required
	Epoch *int64 `json:"epoch"`
	// MaxGPUs caps the GPUs borrowers use at once; default all of the host's GPUs.
	// +optional
	MaxGPUs *int32 `json:"maxGPUs,omitempty"`
	// MaxExecutions caps the executions at once; default one per lent GPU, at least one.
	// +optional
	MaxExecutions *int32 `json:"maxExecutions,omitempty"`
	// MemoryMiB caps the memory of borrowers' executions together; default
	// the host's memory in proportion to the GPUs lent (counting at least one).
	// +optional
	MemoryMiB *int64 `json:"memoryMiB,omitempty"`
	// MilliCPUs caps their CPU time together, in thousandths of a CPU;
	// default the host's CPUs in the same proportion.
	// +optional
	MilliCPUs *int64 `json:"milliCPUs,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostWithdrawRequest is POSTed to reservedhosts/{name}/withdraw by an
// owner admin: stop lending; borrowers' executions on the host drain.
type ReservedHostWithdrawRequest struct {
	metav1.TypeMeta `json:",inline"`

	// Epoch identifies the reservation assignment the owner reviewed.
	// +required
	Epoch *int64 `json:"epoch"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExecutionCancelRequest is POSTed to executions/{name}/cancel by a borrower
// member. A pending or scheduled execution ends as cancelled at once; a
// running one is stopped by its host's agent (TERM, grace period, KILL).
// The record is kept.
type ExecutionCancelRequest struct {
	metav1.TypeMeta `json:",inline"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExecutionReport is POSTed to executions/{name}/report by the agent of the
// host the execution was placed on: the phase it reached and the bounded
// tail of its output.
type ExecutionReport struct {
	metav1.TypeMeta `json:",inline"`

	// Phase is running, succeeded, failed, drained or cancelled.
	Phase ExecutionPhase `json:"phase"`
	// ExitCode of the command, when it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason is a machine-readable cause.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened.
	// +optional
	Message string `json:"message,omitempty"`
	// Log is the tail of the execution's output so far, at most MaxExecutionLogBytes.
	// +optional
	Log string `json:"log,omitempty"`
	// LogDroppedBytes is how much output before Log was dropped.
	// +optional
	LogDroppedBytes int64 `json:"logDroppedBytes,omitempty"`
}

// MaxExecutionLogBytes bounds the output kept of one execution.
const MaxExecutionLogBytes = 256 << 10
