package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/applyconfiguration"
	applyv1 "github.com/nodus-dev/nodus/pkg/generated/applyconfiguration/nodus/v1"
	typedv1 "github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/typed/nodus/v1"
)

// appliedKinds are the kinds whose typed clients apply: those the apply
// configurations' schema (what this command prints, given to
// applyconfiguration-gen) must type.
func appliedKinds() []string {
	var kinds []string
	client := reflect.TypeFor[typedv1.NodusV1Interface]()
	for i := range client.NumMethod() {
		getter := client.Method(i).Type
		if getter.NumOut() != 1 || getter.Out(0).Kind() != reflect.Interface {
			continue
		}
		if _, applies := getter.Out(0).MethodByName("Apply"); applies {
			kinds = append(kinds, strings.TrimSuffix(getter.Out(0).Name(), "Interface"))
		}
	}
	return kinds
}

// TestTheApplyConfigurationsTypeEveryAppliedKind: the generated type
// converter (the fake clientset's, and what Extract reads managedFields
// with) knows each applied kind by the name the scheme gives it, with its
// fields, not as an untyped value. Until session 56 the schema was keyed by
// the OpenAPI model names (dev.nodus.v1.Node) while applyconfiguration-gen
// looked the kinds up by their Go names, and typed none of them.
func TestTheApplyConfigurationsTypeEveryAppliedKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	converter := applyconfiguration.NewTypeConverter(scheme)
	kinds := appliedKinds()
	if len(kinds) < 8 {
		t.Fatalf("the clients apply %v: fewer kinds than the API's eight", kinds)
	}
	for _, kind := range kinds {
		obj, err := scheme.New(nodusv1.SchemeGroupVersion.WithKind(kind))
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		obj.GetObjectKind().SetGroupVersionKind(nodusv1.SchemeGroupVersion.WithKind(kind))
		typed, err := converter.ObjectToTyped(obj)
		if err != nil {
			t.Errorf("%s is not typed: %v", kind, err)
			continue
		}
		// A field the kind does not have is refused by a typed schema, and
		// taken by an untyped one.
		unknown := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": nodusv1.SchemeGroupVersion.String(), "kind": kind, "notAField": "x"}}
		if _, err := converter.ObjectToTyped(unknown); err == nil {
			t.Errorf("%s's schema took a field the kind does not have: it is untyped (%v)", kind, typed.AsValue())
		}
	}
}

// extracts are the Extract functions of the applied kinds' apply
// configurations, which read the kind from the schema by its Go name.
var extracts = map[string]func(runtime.Object, string) (any, error){
	"AccessToken": func(o runtime.Object, m string) (any, error) {
		return applyv1.ExtractAccessToken(o.(*nodusv1.AccessToken), m)
	},
	"Allocation": func(o runtime.Object, m string) (any, error) {
		return applyv1.ExtractAllocation(o.(*nodusv1.Allocation), m)
	},
	"EnrollmentToken": func(o runtime.Object, m string) (any, error) {
		return applyv1.ExtractEnrollmentToken(o.(*nodusv1.EnrollmentToken), m)
	},
	"Execution": func(o runtime.Object, m string) (any, error) {
		return applyv1.ExtractExecution(o.(*nodusv1.Execution), m)
	},
	"Node":    func(o runtime.Object, m string) (any, error) { return applyv1.ExtractNode(o.(*nodusv1.Node), m) },
	"Pool":    func(o runtime.Object, m string) (any, error) { return applyv1.ExtractPool(o.(*nodusv1.Pool), m) },
	"Project": func(o runtime.Object, m string) (any, error) { return applyv1.ExtractProject(o.(*nodusv1.Project), m) },
	"Reservation": func(o runtime.Object, m string) (any, error) {
		return applyv1.ExtractReservation(o.(*nodusv1.Reservation), m)
	},
}

// TestEveryAppliedKindExtracts: each applied kind's Extract function finds
// its kind in the schema and takes what the manager applied (a label).
func TestEveryAppliedKindExtracts(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, kind := range appliedKinds() {
		extract, ok := extracts[kind]
		if !ok {
			t.Errorf("%s applies: add its Extract function to this test", kind)
			continue
		}
		obj, err := scheme.New(nodusv1.SchemeGroupVersion.WithKind(kind))
		if err != nil {
			t.Fatal(err)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		m.SetName("x")
		m.SetLabels(map[string]string{"applied": "yes", "other": "no"})
		m.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "ops", Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: "nodus.dev/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:applied":{}}}}`)}}})
		extracted, err := extract(obj, "ops")
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		data, err := json.Marshal(extracted)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"labels":{"applied":"yes"}`) {
			t.Errorf("%s extracted %s, want ops' label alone", kind, data)
		}
	}
}

// TestAnExtractTakesOnlyTheManagersEntriesOfAKeyedList: the node's
// conditions are a list keyed by type; two managers apply one condition
// each to the status, and the status each extracts is its own condition
// alone.
func TestAnExtractTakesOnlyTheManagersEntriesOfAKeyedList(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kind := nodusv1.SchemeGroupVersion.WithKind("Node")
	fields, err := managedfields.NewDefaultFieldManager(applyconfiguration.NewTypeConverter(scheme),
		runtime.UnsafeObjectConvertor(scheme), scheme, scheme, kind, kind.GroupVersion(), "status", nil)
	if err != nil {
		t.Fatal(err)
	}
	var live runtime.Object = &nodusv1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "nodus.dev/v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u"}}
	for manager, condition := range map[string]string{"liveness": "Ready", "cleaner": "Cleaned"} {
		applied := applyv1.Node("n").WithStatus(applyv1.NodeStatus().WithConditions(metav1apply.Condition().
			WithType(condition).WithStatus(metav1.ConditionTrue).WithReason(condition).WithMessage("").
			WithLastTransitionTime(metav1.Now())))
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(applied)
		if err != nil {
			t.Fatal(err)
		}
		if live, err = fields.Apply(live, &unstructured.Unstructured{Object: content}, manager, false); err != nil {
			t.Fatalf("%s's apply: %v", manager, err)
		}
	}
	node := live.(*nodusv1.Node)
	if len(node.Status.Conditions) != 2 {
		t.Fatalf("the applies left the conditions %+v, want both", node.Status.Conditions)
	}
	for manager, want := range map[string]string{"liveness": "Ready", "cleaner": "Cleaned"} {
		extracted, err := applyv1.ExtractNodeStatus(node, manager)
		if err != nil {
			t.Errorf("%s: %v", manager, err)
			continue
		}
		var got []string
		if extracted.Status != nil {
			for _, c := range extracted.Status.Conditions {
				got = append(got, *c.Type)
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s extracted the conditions %v, want [%s] (managedFields %+v)", manager, got, want, node.ManagedFields)
		}
	}
}
