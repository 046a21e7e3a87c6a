package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// EnrollmentToken lets one physical server's nodusd enroll into a pool,
// once. The server generates the secret on create, returns it once and
// stores only its hash; deleting the token revokes it.
type EnrollmentToken struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec says where the enrolled node goes.
	Spec EnrollmentTokenSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status holds the token's hash and its use.
	// +optional
	Status EnrollmentTokenStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// EnrollmentTokenSpec is what an enrollment creates.
type EnrollmentTokenSpec struct {
	// Pool the node joins.
	Pool string `json:"pool" protobuf:"bytes,1,opt,name=pool"`
	// NodeName is the one node the token enrolls. A token with a node name
	// may enroll that node again (a reinstalled server) if it is of the
	// token's pool; a token without one enrolls only a name no node has yet.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,2,opt,name=nodeName"`
	// ResourceClass of the node.
	ResourceClass string `json:"resourceClass" protobuf:"bytes,3,opt,name=resourceClass"`
	// Traits of the node.
	// +optional
	// +listType=set
	Traits []string `json:"traits,omitempty" protobuf:"bytes,4,rep,name=traits"`
	// LoginUser is the node's default login user.
	// +optional
	LoginUser string `json:"loginUser,omitempty" protobuf:"bytes,5,opt,name=loginUser"`
	// ExpiresAt is when the token stops working; defaults to 24 hours after creation.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty" protobuf:"bytes,6,opt,name=expiresAt"`
}

// EnrollmentTokenStatus records the token's verifier and use.
type EnrollmentTokenStatus struct {
	// TokenHash is the hex SHA-256 of the token's secret part.
	// +optional
	TokenHash string `json:"tokenHash,omitempty" protobuf:"bytes,1,opt,name=tokenHash"`
	// Token is set only in the response to the create request.
	// +optional
	Token string `json:"token,omitempty" protobuf:"bytes,2,opt,name=token"`
	// CAFingerprint is the SHA-256 fingerprint of the server CA, for the
	// agent to pin; set in the create response.
	// +optional
	CAFingerprint string `json:"caFingerprint,omitempty" protobuf:"bytes,3,opt,name=caFingerprint"`
	// UsedBy is the node that enrolled with the token.
	// +optional
	UsedBy string `json:"usedBy,omitempty" protobuf:"bytes,4,opt,name=usedBy"`
	// UsedAt is when it did.
	// +optional
	UsedAt *metav1.Time `json:"usedAt,omitempty" protobuf:"bytes,5,opt,name=usedAt"`
	// AgentKeyFingerprint is the SHA-256 fingerprint (sha256:HEX) of the
	// public key the token enrolled. The agent holding that key may ask
	// again, until the token expires, when the answer did not reach it.
	// +optional
	AgentKeyFingerprint string `json:"agentKeyFingerprint,omitempty" protobuf:"bytes,6,opt,name=agentKeyFingerprint"`
	// NodeUID is the Node object the enrollment is bound to: the node as it
	// was when the token was used, or the one the enrollment created.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty" protobuf:"bytes,7,opt,name=nodeUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// AgentGeneration is the agent generation the enrollment gives that
	// node: its generation then, plus one. The node carries the token's
	// UID (annotation nodus.dev/enrollment-token-uid) once it has it.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty" protobuf:"varint,8,opt,name=agentGeneration"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// EnrollmentTokenList is a list of EnrollmentTokens.
type EnrollmentTokenList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []EnrollmentToken `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeEnrollment is POSTed to nodes/{name}/enroll with an enrollment token
// as the bearer credential. The answer carries the node's client
// certificate, signed for the node's new agent generation.
type NodeEnrollment struct {
	metav1.TypeMeta `json:",inline"`

	// CertificateRequest is a PEM certificate signing request for the
	// agent's own key; the server sets the subject.
	CertificateRequest string `json:"certificateRequest" protobuf:"bytes,1,opt,name=certificateRequest"`
	// Certificate is the signed client certificate, in the answer.
	// +optional
	Certificate string `json:"certificate,omitempty" protobuf:"bytes,2,opt,name=certificate"`
	// CA is the server CA certificate, in the answer.
	// +optional
	CA string `json:"ca,omitempty" protobuf:"bytes,3,opt,name=ca"`
	// AgentGeneration is the node's new agent generation, in the answer.
	// +optional
	AgentGeneration int64 `json:"agentGeneration,omitempty" protobuf:"varint,4,opt,name=agentGeneration"`
	// CleaningOwed says that the host's state directory records a tenant's
	// access that no cleaning since has discharged: the machine is enrolled
	// again with its state kept (or nodusd holds the state database and it
	// could not be read). A node the enrollment creates is then created
	// being cleaned, and one it enrolls again that nothing holds goes to
	// cleaning, so that no one claims the machine before that cleaning
	// succeeded. The agent's word can only hold its own node back. In the
	// answer, it says that the node owes that cleaning before anyone claims
	// it (a server before session 60 answers without it).
	// +optional
	CleaningOwed bool `json:"cleaningOwed,omitempty" protobuf:"varint,5,opt,name=cleaningOwed"`
}
