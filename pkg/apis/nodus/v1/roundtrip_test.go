package v1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/randfill"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Every kind, filled at random, must come back unchanged from JSON and from
// protobuf: a field the generated protobuf encoding lacks, or encodes
// differently, fails here before a client that asks for protobuf sees it.
func TestEveryKindRoundTripsThroughJSONAndProtobuf(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, func(scheme *runtime.Scheme) {
		utilruntime.Must(nodusv1.AddToScheme(scheme))
	}, defaulted)
}

// defaulted fills the fields that decoding defaults with values decoding
// keeps, as Kubernetes' own fuzzers do: an empty one would come back as its
// default and read as a loss.
func defaulted(serializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *nodusv1.NodeStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.ProvisionState == "" {
				s.ProvisionState = nodusv1.ProvisionStateEnroll
			}
		},
		func(m *nodusv1.ProjectMember, c randfill.Continue) {
			c.FillNoCustom(m)
			if m.Kind == "" {
				m.Kind = nodusv1.MemberKindUser
			}
		},
	}
}
