package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostReleaseRequest confirms irreversible retirement under the reviewed reservation epoch.
type ReservedHostReleaseRequest struct {
	metav1.TypeMeta `json:",inline"`

	// Agreed confirms access retirement without shortening the supplier’s reservation term.
	// +required
	Agreed *bool `json:"agreed" protobuf:"varint,1,opt,name=agreed"`
	// Epoch identifies the reservation assignment reviewed before retirement.
	// +required
	Epoch *int64 `json:"epoch" protobuf:"varint,2,opt,name=epoch"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeCleanRequest is POSTed by an operator to nodes/{name}/clean to ask the
// node's agent for a new handover cleaning (after fixing what made the last
// one fail). The answer is the Node, with the new request in status.cleaning.
type NodeCleanRequest struct {
	metav1.TypeMeta `json:",inline"`
}

// MaxHeartbeatIntervalSeconds bounds the interval a server may give its
// agents (--heartbeat-interval); an agent keeps to it whatever an answer
// says. An agent's beat is also when it ends the late sessions of an
// access that ended, and a node is not ready only after three intervals.
const MaxHeartbeatIntervalSeconds = 60

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeHeartbeat is what a node's agent reports at every heartbeat, POSTed to
// nodes/{name}/heartbeat. The server answers with the same kind, with
// IntervalSeconds set to when it expects the next one.
type NodeHeartbeat struct {
	metav1.TypeMeta `json:",inline"`

	// AgentGeneration is the generation of the agent's credential. Reports of
	// any other generation than the node's current one are refused.
	AgentGeneration int64 `json:"agentGeneration" protobuf:"varint,1,opt,name=agentGeneration"`
	// Reservations report, for each reservation the agent knows on this
	// node, what it applied and what still runs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Reservations []ReservationEvidence `json:"reservations,omitempty" protobuf:"bytes,2,rep,name=reservations"`
	// Cleaning reports a handover cleaning the agent finished.
	// +optional
	Cleaning *CleaningEvidence `json:"cleaning,omitempty" protobuf:"bytes,3,opt,name=cleaning"`
	// IntervalSeconds is set by the server in its answer: send the next
	// heartbeat within this many seconds.
	// +optional
	IntervalSeconds int32 `json:"intervalSeconds,omitempty" protobuf:"varint,4,opt,name=intervalSeconds"`
}

// ReservationEvidence is an agent's account of one reservation on its node.
type ReservationEvidence struct {
	// Name of the Reservation.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// AppliedEpoch is the latest access epoch the agent enforces.
	AppliedEpoch int64 `json:"appliedEpoch" protobuf:"varint,2,opt,name=appliedEpoch"`
	// OwnerSessions is the number of live sessions of the owner project's
	// people: processes of the login user. An agent that cannot count them
	// (it cannot read the host's processes) reports at least 1, so that a
	// release does not complete on a count it could not make.
	OwnerSessions int32 `json:"ownerSessions" protobuf:"varint,3,opt,name=ownerSessions"`
	// BorrowerExecutions is the number of borrower executions still
	// running: processes of the borrower accounts, at least 1 while the
	// agent cannot count them.
	BorrowerExecutions int32 `json:"borrowerExecutions" protobuf:"varint,4,opt,name=borrowerExecutions"`
	// RefusedEpoch, when set, is the reservation's epoch whose access the
	// agent does not grant, Refusal saying why (a login user it never
	// grants, such as a system account of the host); AppliedEpoch stays
	// what it applied before, 0 for nothing.
	// +optional
	RefusedEpoch int64 `json:"refusedEpoch,omitempty" protobuf:"varint,5,opt,name=refusedEpoch"`
	// Refusal is why the agent does not grant RefusedEpoch's access: one line.
	// +optional
	Refusal string `json:"refusal,omitempty" protobuf:"bytes,6,opt,name=refusal"`
	// RefusedUID is the UID of the reservation the agent refused, set
	// with RefusedEpoch: a refusal of one deleted since is not about
	// another made under its name.
	// +optional
	RefusedUID types.UID `json:"refusedUID,omitempty" protobuf:"bytes,7,opt,name=refusedUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// CleaningEvidence is an agent's account of one handover cleaning.
type CleaningEvidence struct {
	// Request is the node's status.cleaning.request the agent carried out.
	Request int64 `json:"request" protobuf:"varint,1,opt,name=request"`
	// AppliedEpoch is the epoch of the retired reservation the agent had
	// applied before it cleaned.
	// +optional
	AppliedEpoch int64 `json:"appliedEpoch,omitempty" protobuf:"varint,2,opt,name=appliedEpoch"`
	// Succeeded says whether every step worked.
	Succeeded bool `json:"succeeded" protobuf:"varint,3,opt,name=succeeded"`
	// Steps say what the agent did, in order.
	// +optional
	// +listType=atomic
	Steps []string `json:"steps,omitempty" protobuf:"bytes,4,rep,name=steps"`
	// Message says what failed.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
	// CommandExitCode is the exit status of the operator's cleaning command, when one ran.
	// +optional
	CommandExitCode *int32 `json:"commandExitCode,omitempty" protobuf:"varint,6,opt,name=commandExitCode"`
	// CommandOutput is the tail of that command's output.
	// +optional
	CommandOutput string `json:"commandOutput,omitempty" protobuf:"bytes,7,opt,name=commandOutput"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ReservedHostSSHCertificate is POSTed to reservedhosts/{name}/ssh-certificate
// by a project member with the public key to certify; the answer carries a
// short-lived SSH user certificate bound to the reservation's current epoch
// and where to connect.
type ReservedHostSSHCertificate struct {
	metav1.TypeMeta `json:",inline"`

	// PublicKey is the key to certify, in authorized_keys format.
	PublicKey string `json:"publicKey" protobuf:"bytes,1,opt,name=publicKey"`
	// Certificate is the SSH user certificate, in the answer.
	// +optional
	Certificate string `json:"certificate,omitempty" protobuf:"bytes,2,opt,name=certificate"`
	// Principal is the certificate's only principal: the reservation and epoch.
	// +optional
	Principal string `json:"principal,omitempty" protobuf:"bytes,3,opt,name=principal"`
	// LoginUser is the account to log in as.
	// +optional
	LoginUser string `json:"loginUser,omitempty" protobuf:"bytes,4,opt,name=loginUser"`
	// Address is host:port of the host's sshd, as its agent reports it.
	// +optional
	Address string `json:"address,omitempty" protobuf:"bytes,5,opt,name=address"`
	// Epoch is the reservation epoch the certificate is bound to.
	// +optional
	Epoch int64 `json:"epoch,omitempty" protobuf:"varint,6,opt,name=epoch"`
	// ValidBefore is when the certificate expires: at most an hour, never past endsAt.
	// +optional
	ValidBefore *metav1.Time `json:"validBefore,omitempty" protobuf:"bytes,7,opt,name=validBefore"`
}
