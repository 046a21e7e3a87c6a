package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AccessToken is a bearer credential for one person. The server generates the
// secret on create, returns it once in the create response, and stores only
// its SHA-256 hash. Deleting the AccessToken revokes it.
type AccessToken struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the identity the token authenticates as.
	Spec AccessTokenSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status holds the token's hash, and the token itself in the create response only.
	// +optional
	Status AccessTokenStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// AccessTokenSpec is the identity a token authenticates as.
type AccessTokenSpec struct {
	// User is the user name the token authenticates as.
	User string `json:"user" protobuf:"bytes,1,opt,name=user"`
	// Groups the user is a member of, in addition to nodus:authenticated.
	// +optional
	// +listType=set
	Groups []string `json:"groups,omitempty" protobuf:"bytes,2,rep,name=groups"`
	// ExpiresAt is when the token stops working. Empty means never.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty" protobuf:"bytes,3,opt,name=expiresAt"`
	// Description says what the token is for.
	// +optional
	Description string `json:"description,omitempty" protobuf:"bytes,4,opt,name=description"`
}

// AccessTokenStatus holds the token's verifier.
type AccessTokenStatus struct {
	// TokenHash is the hex SHA-256 of the token's secret part.
	// +optional
	TokenHash string `json:"tokenHash,omitempty" protobuf:"bytes,1,opt,name=tokenHash"`
	// Token is the bearer token. It is set only in the response to the create
	// request and is never stored.
	// +optional
	Token string `json:"token,omitempty" protobuf:"bytes,2,opt,name=token"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AccessTokenList is a list of AccessTokens.
type AccessTokenList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	Items           []AccessToken `json:"items" protobuf:"bytes,2,rep,name=items"`
}
