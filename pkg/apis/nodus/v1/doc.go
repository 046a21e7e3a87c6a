// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:defaulter-gen=TypeMeta
// +groupName=nodus.dev
// +k8s:openapi-model-package=dev.nodus.v1

// Package v1 holds the nodus.dev/v1 API: the operator-side kinds (Project,
// Pool, Node, Allocation, Reservation, AccessToken) and the customer-side
// ReservedHost projection. The server keeps a single version, so these types
// double as the internal (hub) version and need no conversion code.
package v1
