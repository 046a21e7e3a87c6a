package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Allocation claims one Node with OpenStack Ironic's semantics: by resource
// class, required traits and optional candidate nodes, or by naming the node
// to backfill.
type Allocation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the request.
	Spec AllocationSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status is the outcome.
	// +optional
	Status AllocationStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// AllocationSpec asks for one node.
type AllocationSpec struct {
	// IronicName is the allocation's name in the Ironic API (/v1): 1 to 255
	// of A-Z a-z 0-9 - . _ ~, unique among allocations, and it may change
	// (metadata.name cannot). Empty: the allocation has no Ironic name. A
	// create that gives metadata.name and no ironicName takes metadata.name.
	// +optional
	IronicName string `json:"ironicName,omitempty" protobuf:"bytes,1,opt,name=ironicName"`
	// ResourceClass the node must have. Required unless Node is set.
	// +optional
	ResourceClass string `json:"resourceClass,omitempty" protobuf:"bytes,2,opt,name=resourceClass"`
	// Traits the node must all have.
	// +optional
	// +listType=set
	Traits []string `json:"traits,omitempty" protobuf:"bytes,3,rep,name=traits"`
	// CandidateNodes restricts the choice to these nodes: names, or UIDs (an
	// entry is looked up as a node's UID first, as Ironic reads a UUID, then
	// as a name).
	// +optional
	// +listType=set
	CandidateNodes []string `json:"candidateNodes,omitempty" protobuf:"bytes,4,rep,name=candidateNodes"`
	// Node backfills an allocation for a node that is already in use: its
	// UID or its name, looked up as for CandidateNodes.
	// +optional
	Node string `json:"node,omitempty" protobuf:"bytes,5,opt,name=node"`
	// Owner is recorded on the allocation and its node, as Ironic's owner field.
	// +optional
	Owner string `json:"owner,omitempty" protobuf:"bytes,6,opt,name=owner"`
	// Extra is free-form operator data.
	// +optional
	Extra map[string]string `json:"extra,omitempty" protobuf:"bytes,7,rep,name=extra"`
}

// AllocationState is Ironic's allocation state.
type AllocationState string

const (
	// AllocationStateAllocating: the controller is still looking for a node.
	AllocationStateAllocating AllocationState = "allocating"
	// AllocationStateActive: a node is claimed.
	AllocationStateActive AllocationState = "active"
	// AllocationStateError: no node could be claimed; see lastError.
	AllocationStateError AllocationState = "error"
)

// AllocationStatus is the outcome of an allocation.
type AllocationStatus struct {
	// State is allocating, active or error.
	// +optional
	State AllocationState `json:"state,omitempty" protobuf:"bytes,1,opt,name=state,casttype=AllocationState"`
	// Node is the claimed node's name.
	// +optional
	Node string `json:"node,omitempty" protobuf:"bytes,2,opt,name=node"`
	// LastError says which constraint could not be met when State is error.
	// +optional
	LastError string `json:"lastError,omitempty" protobuf:"bytes,3,opt,name=lastError"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AllocationList is a list of Allocations.
type AllocationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []Allocation `json:"items" protobuf:"bytes,2,rep,name=items"`
}
