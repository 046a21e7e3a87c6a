package typemeta_test

import (
	stdjson "encoding/json"
	"math/rand"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/typemeta"
)

// Every kind, filled at random and encoded as the server stores it, must be
// read on the fast path, with apimachinery's answer, and decode to the same
// object through a codec built on the Leading serializer.
func TestEveryStoredKindIsReadOnTheFastPathAsApimachineryReadsIt(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(nodusv1.AddToScheme(scheme))
	codecs := serializer.NewCodecFactory(scheme)
	stored := codecs.LegacyCodec(nodusv1.SchemeGroupVersion)
	leading := versioning.NewDefaultingCodecForScheme(scheme, typemeta.Serializer(scheme), typemeta.Serializer(scheme),
		nodusv1.SchemeGroupVersion, runtime.InternalGroupVersioner)
	fill := fuzzer.FuzzerFor(metafuzzer.Funcs, rand.NewSource(16), codecs)
	kinds := 0
	for kind, goType := range scheme.KnownTypes(nodusv1.SchemeGroupVersion) {
		// The group's own kinds, not the option types registered with them.
		obj, ok := reflect.New(goType).Interface().(runtime.Object)
		if !ok || goType.PkgPath() != reflect.TypeFor[nodusv1.Node]().PkgPath() {
			continue
		}
		kinds++
		for range 20 {
			fill.Fill(obj)
			data, err := runtime.Encode(stored, obj)
			if err != nil {
				t.Fatalf("%s: encode: %v", kind, err)
			}
			want, wantErr := json.DefaultMetaFactory.Interpret(data)
			got, gotErr := typemeta.Leading{}.Interpret(data)
			if wantErr != nil || gotErr != nil || *got != *want {
				t.Fatalf("%s: Leading read %v (%v), apimachinery %v (%v), of %s", kind, got, gotErr, want, wantErr, data)
			}
			if !typemeta.OnFastPath(data) {
				t.Fatalf("%s: the server's encoding did not take the fast path: %.80s", kind, data)
			}
			// The same object as a watch event, as the server sends it.
			event, err := stdjson.Marshal(metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: data}})
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr = json.DefaultMetaFactory.Interpret(event)
			got, gotErr = typemeta.Leading{}.Interpret(event)
			if wantErr != nil || gotErr != nil || *got != *want || !typemeta.OnFastPath(event) {
				t.Fatalf("%s: in a watch event, Leading read %v (%v, fast path %t), apimachinery %v (%v)", kind, got, gotErr, typemeta.OnFastPath(event), want, wantErr)
			}
			viaDefault, err := runtime.Decode(stored, data)
			if err != nil {
				t.Fatalf("%s: decode: %v", kind, err)
			}
			viaLeading, err := runtime.Decode(leading, data)
			if err != nil {
				t.Fatalf("%s: decode with Leading: %v", kind, err)
			}
			if !apiequality.Semantic.DeepEqual(viaDefault, viaLeading) {
				t.Fatalf("%s: decoded differently:\n%#v\n%#v", kind, viaDefault, viaLeading)
			}
		}
	}
	if kinds < 10 {
		t.Fatalf("only %d kinds in the scheme", kinds)
	}
}

// Whatever the server would not write goes to apimachinery's reading, with
// its answer or its error.
func TestAnythingElseIsReadAsApimachineryReadsIt(t *testing.T) {
	for _, doc := range []string{
		`{"kind":"Node","apiVersion":"nodus.dev/v1","spec":{}}`,
		`{"apiVersion":"nodus.dev/v1","kind":"Node"}`,
		` { "kind" : "Node" , "apiVersion" : "nodus.dev/v1" } `,
		`{"kind":"Node","kind":"Reservation","apiVersion":"nodus.dev/v1"}`,
		`{"apiVersion":"v1","apiVersion":"nodus.dev/v1","kind":"Node"}`,
		`{"metadata":{},"kind":"Node","apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Node","metadata":{"name":"a"},"apiVersion":"nodus.dev/v1"}`,
		`{"Kind":"Node","apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Node","APIVERSION":"nodus.dev/v1"}`,
		`{"kind":"No\u0064e","apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Nöde","apiVersion":"nodus.dev/v1"}`,
		"{\"kind\":\"No\xffde\",\"apiVersion\":\"nodus.dev/v1\"}",
		`{"kind":"Node"}`,
		`{"type":"ADDED","object":{"kind":"Node","apiVersion":"nodus.dev/v1"}}`,
		` {"type" : "ADDED" , "object" : null}`,
		`{"type":"ADDED","kind":"Node","apiVersion":"nodus.dev/v1"}`,
		`{"type":"ADDED"}`,
		`{"type":1,"object":{}}`,
		`{"kind":"Node","type":"ADDED","object":{}}`,
		`{"object":{},"type":"ADDED","kind":"Node","apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Node","apiVersion":"a/b/c"}`,
		`{"kind":"Node","apiVersion":1}`,
		`{"kind":null,"apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Node" "apiVersion":"nodus.dev/v1"}`,
		`{"kind":"Node","apiVersion"}`,
		`{"kind`,
		`["kind","Node"]`,
		`{}`,
		``,
		`null`,
	} {
		want, wantErr := json.DefaultMetaFactory.Interpret([]byte(doc))
		got, gotErr := typemeta.Leading{}.Interpret([]byte(doc))
		switch {
		case (wantErr == nil) != (gotErr == nil):
			t.Errorf("%q: Leading's error %v, apimachinery's %v", doc, gotErr, wantErr)
		case wantErr == nil && *got != *want:
			t.Errorf("%q: Leading read %v, apimachinery %v", doc, got, want)
		}
	}
}

// The rest of a document is not read for its kind: the decoding that follows
// refuses it when it is not JSON.
func TestABrokenRestIsRefusedByTheDecoding(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(nodusv1.AddToScheme(scheme))
	for _, doc := range []string{`{"kind":"Node","apiVersion":"nodus.dev/v1"`, `{"kind":"Node","apiVersion":"nodus.dev/v1",}`} {
		if !typemeta.OnFastPath([]byte(doc)) {
			t.Fatalf("%q did not take the fast path", doc)
		}
		if obj, _, err := typemeta.Serializer(scheme).Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%q decoded to %#v", doc, obj)
		}
	}
}
