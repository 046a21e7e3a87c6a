package base

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestAStoreSelectsOnlyWhatSelectorsAccept: Node's store selected on
// status.reservation, which the field selectors refused.
func TestAStoreSelectsOnlyWhatSelectorsAccept(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kind := func(fieldNames ...string) Kind {
		return Kind{New: func() runtime.Object { return &nodusv1.Node{} }, Fields: func(runtime.Object) fields.Set {
			set := fields.Set{}
			for _, f := range fieldNames {
				set[f] = ""
			}
			return set
		}}
	}
	if err := selectorsAcceptEveryField(scheme, kind(nodusv1.SelectableFields("Node")...)); err != nil {
		t.Errorf("the same fields: %v", err)
	}
	if err := selectorsAcceptEveryField(scheme, kind(append(nodusv1.SelectableFields("Node"), "status.other")...)); err == nil {
		t.Error("a field only the store knows passed")
	}
	if err := selectorsAcceptEveryField(scheme, kind(nodusv1.SelectableFields("Node")[1:]...)); err == nil {
		t.Error("a field only the selectors know passed")
	}
	indexed := kind(nodusv1.SelectableFields("Node")...)
	indexed.Indexed = "status.other"
	if err := selectorsAcceptEveryField(scheme, indexed); err == nil {
		t.Error("an index of a field the store does not select on passed")
	}
	indexed.Indexed = nodusv1.SelectableFields("Node")[0]
	if err := selectorsAcceptEveryField(scheme, indexed); err != nil {
		t.Errorf("an index of a selectable field: %v", err)
	}
}
