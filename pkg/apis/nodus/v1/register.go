package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every Nodus kind.
const GroupName = "nodus.dev"

// SchemeGroupVersion is the only served version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

// internalGroupVersion lets the generic apiserver, which converts every request
// to an internal version, use the v1 types unchanged.
var internalGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder collects the functions that register this group.
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs, addFieldLabelConversions)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers the group as v1 and as the internal hub version.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

// Kind qualifies a kind name with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

func knownTypes() []runtime.Object {
	return []runtime.Object{
		&Project{}, &ProjectList{},
		&Pool{}, &PoolList{},
		&Node{}, &NodeList{},
		&Allocation{}, &AllocationList{},
		&Reservation{}, &ReservationList{},
		&ReservedHost{}, &ReservedHostList{},
		&AccessToken{}, &AccessTokenList{},
		&EnrollmentToken{}, &EnrollmentTokenList{},
		&Execution{}, &ExecutionList{},
		&HostLending{}, &HostLendingList{},
		&ReservedHostLendRequest{}, &ReservedHostWithdrawRequest{}, &ExecutionCancelRequest{}, &ExecutionReport{},
		&ReservedHostReleaseRequest{}, &NodeHeartbeat{}, &NodeCleanRequest{}, &NodeEnrollment{}, &ReservedHostSSHCertificate{},
	}
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, knownTypes()...)
	scheme.AddKnownTypes(internalGroupVersion, knownTypes()...)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}
