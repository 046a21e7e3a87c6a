package validation

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// The fuzz targets feed arbitrary bytes to the same strict decoder the server
// uses and validate whatever decodes: neither may panic, and every error must
// name the field it is about.

func decoder(t testing.TB) runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

func fuzzKind[T runtime.Object](f *testing.F, seeds []string, validate func(T) field.ErrorList) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	dec := decoder(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, _, err := dec.Decode(data, nil, nil)
		if err != nil {
			return
		}
		typed, ok := obj.(T)
		if !ok {
			return
		}
		for _, e := range validate(typed) {
			if e.Field == "" || e.Type == "" {
				t.Fatalf("error without a field path or type: %#v", e)
			}
		}
	})
}

func FuzzProject(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"acme"},"spec":{"members":[{"name":"alice","role":"admin"}]}}`,
		`{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"a.b"},"spec":{"members":[{"kind":"Robot","name":"","role":"god"}]}}`,
	}, ValidateProject)
}

func FuzzPool(f *testing.F) {
	fuzzKind(f, []string{`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"fra1"},"spec":{"supplier":"hx"}}`}, ValidatePool)
}

func FuzzNode(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Node","metadata":{"name":"n"},"spec":{"pool":"p","resourceClass":"gpu","traits":["CUSTOM_X"]},"status":{"inventory":{"cpu":-1,"gpus":[{"type":""}]}}}`,
	}, func(n *nodusv1.Node) field.ErrorList { return append(ValidateNode(n), ValidateNodeStatus(n)...) })
}

func FuzzAllocation(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"name":"a"},"spec":{"resourceClass":"gpu","candidateNodes":["n1","n1"],"node":"x"},"status":{"state":"active"}}`,
	}, func(a *nodusv1.Allocation) field.ErrorList {
		return append(ValidateAllocation(a), ValidateAllocationStatus(a)...)
	})
}

func FuzzReservation(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Reservation","metadata":{"name":"r"},"spec":{"project":"acme","placement":{"node":"n","traits":["X"]},"startsAt":"2027-01-01T00:00:00Z","endsAt":"2026-01-01T00:00:00Z","loginUser":"root"}}`,
	}, func(r *nodusv1.Reservation) field.ErrorList {
		return append(ValidateReservation(r), ValidateReservationStatus(r, r)...)
	})
}

func FuzzReservedHost(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"ReservedHost","metadata":{"name":"h","namespace":"acme"},"status":{"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1},"reservation":{"project":"acme","startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z","loginUser":"ubuntu","epoch":1,"state":"active"},"connect":{"command":"","host":"h","hostKey":"k","loginUser":"ubuntu"},"release":{"requestedAt":"2026-06-01T00:00:00Z","drainedAt":"2026-05-01T00:00:00Z"}}}`,
	}, ValidateReservedHost)
}

func FuzzAccessToken(f *testing.F) {
	fuzzKind(f, []string{`{"apiVersion":"nodus.dev/v1","kind":"AccessToken","metadata":{"name":"t"},"spec":{"user":"alice","groups":[""]}}`}, ValidateAccessToken)
}

func FuzzExecution(f *testing.F) {
	fuzzKind(f, []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"e","namespace":"p"},"spec":{"pool":"fra1","command":["python","x.py"],"env":[{"name":"A","value":"1"},{"name":"A","value":"2"}],"gpus":-3,"maxRuntimeSeconds":0}}`,
	}, ValidateExecution)
}
