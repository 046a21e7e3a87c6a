package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Reservation is the contract that assigns a whole physical server to a
// customer project for a term. Its customer-safe projection is the
// ReservedHost of the same name in the project's namespace.
type Reservation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the contract.
	Spec ReservationSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status is the contract's progress and access epoch.
	// +optional
	Status ReservationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ReservationSpec is a reservation contract.
type ReservationSpec struct {
	// Project is the customer project the server is reserved to.
	Project string `json:"project" protobuf:"bytes,1,opt,name=project"`
	// Placement says which server: an existing Allocation, a named Node, or a
	// resource class and traits from which an Allocation is made.
	Placement ReservationPlacement `json:"placement" protobuf:"bytes,2,opt,name=placement"`
	// StartsAt is the beginning of the reservation term.
	StartsAt metav1.Time `json:"startsAt" protobuf:"bytes,3,opt,name=startsAt"`
	// EndsAt is the exclusive end of the reservation term.
	EndsAt metav1.Time `json:"endsAt" protobuf:"bytes,4,opt,name=endsAt"`
	// LoginUser is the operating-system account the project's people log in as.
	// Defaults to the node's loginUser when empty.
	// +optional
	LoginUser string `json:"loginUser,omitempty" protobuf:"bytes,5,opt,name=loginUser"`
}

// ReservationPlacement chooses the server of a reservation. Exactly one of
// Allocation, Node or ResourceClass is set.
type ReservationPlacement struct {
	// Allocation names an existing Allocation.
	// +optional
	Allocation string `json:"allocation,omitempty" protobuf:"bytes,1,opt,name=allocation"`
	// Node names a Node directly.
	// +optional
	Node string `json:"node,omitempty" protobuf:"bytes,2,opt,name=node"`
	// ResourceClass asks the controller to allocate a node of this class.
	// +optional
	ResourceClass string `json:"resourceClass,omitempty" protobuf:"bytes,3,opt,name=resourceClass"`
	// Traits the allocated node must have; only with ResourceClass.
	// +optional
	// +listType=set
	Traits []string `json:"traits,omitempty" protobuf:"bytes,4,rep,name=traits"`
}

// ReservationState controls access to the reserved server. The lifecycle is
// pending → active → releasing → released when the owner releases capacity,
// and active → ending → ended when the term runs out.
type ReservationState string

const (
	// ReservationStatePending: the term has not started or no node is placed yet; no access.
	ReservationStatePending ReservationState = "pending"
	// ReservationStateActive: the project's members may log in.
	ReservationStateActive ReservationState = "active"
	// ReservationStateReleasing: the owner released capacity; access is being retired.
	ReservationStateReleasing ReservationState = "releasing"
	// ReservationStateReleased: the agent confirmed that nothing of the owner or borrowers runs.
	ReservationStateReleased ReservationState = "released"
	// ReservationStateEnding: the term ended; access is being retired.
	ReservationStateEnding ReservationState = "ending"
	// ReservationStateEnded: the term ended and the agent confirmed the drain.
	ReservationStateEnded ReservationState = "ended"
)

// MaxLendingRequests bounds ReservationStatus.LendingRequests: a retry
// comes within seconds of a crash, not after that many later changes.
const MaxLendingRequests = 16

// ReservationStatus is the progress of a reservation.
type ReservationStatus struct {
	// State controls access, never hardware availability to other workloads.
	// +optional
	State ReservationState `json:"state,omitempty" protobuf:"bytes,1,opt,name=state,casttype=ReservationState"`
	// Epoch fences connections after access changes. It increases on every
	// access change and is never reused.
	// +optional
	Epoch int64 `json:"epoch,omitempty" protobuf:"varint,2,opt,name=epoch"`
	// ProjectAccessRevision is the project's status.accessRevision this
	// reservation's epoch answers to: when the project's is higher (a member
	// lost SSH access), an active reservation's epoch rises, and with it
	// every certificate issued before stops matching.
	// +optional
	ProjectAccessRevision int64 `json:"projectAccessRevision,omitempty" protobuf:"varint,13,opt,name=projectAccessRevision"`
	// Node is the server the reservation landed on.
	// +optional
	Node string `json:"node,omitempty" protobuf:"bytes,3,opt,name=node"`
	// Allocation is the Allocation that holds the server.
	// +optional
	Allocation string `json:"allocation,omitempty" protobuf:"bytes,4,opt,name=allocation"`
	// LoginUser is the operating-system account access was granted for at the current epoch.
	// +optional
	LoginUser string `json:"loginUser,omitempty" protobuf:"bytes,5,opt,name=loginUser"`
	// Release is set when the owner released capacity.
	// +optional
	Release *ReservedHostReleaseStatus `json:"release,omitempty" protobuf:"bytes,6,opt,name=release"`
	// ReleaseFieldManager is the fieldManager of the release request; the
	// reservation controller records it in the ReservedHost's managedFields
	// (subresource release-capacity).
	// +optional
	ReleaseFieldManager string `json:"releaseFieldManager,omitempty" protobuf:"bytes,7,opt,name=releaseFieldManager"`
	// ReleaseRequest identifies the Idempotency-Key record of the release
	// request (a digest of the caller, path and key): a retry of that
	// request, after a crash cut its answer, is recognised by it and gets
	// the release's answer instead of AlreadyReleased.
	// +optional
	ReleaseRequest string `json:"releaseRequest,omitempty" protobuf:"bytes,8,opt,name=releaseRequest"`
	// LendingRequests identify the Idempotency-Key records of the latest
	// keyed lend and withdraw requests, newest last (at most
	// MaxLendingRequests): a retry of one of them, after a crash cut its
	// answer, recognises its effect by it and gets its answer instead of
	// applying again over a later change.
	// +optional
	// +listType=atomic
	LendingRequests []string `json:"lendingRequests,omitempty" protobuf:"bytes,9,rep,name=lendingRequests"`
	// Lending is the owner's lending agreement, once it lent the host.
	// +optional
	Lending *ReservationLending `json:"lending,omitempty" protobuf:"bytes,10,opt,name=lending"`
	// EndedAt is when current-agent evidence confirmed the drain after the term ended.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty" protobuf:"bytes,11,opt,name=endedAt"`
	// Conditions report placement and eligibility.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,12,rep,name=conditions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservationList is a list of Reservations.
type ReservationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Reservation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
