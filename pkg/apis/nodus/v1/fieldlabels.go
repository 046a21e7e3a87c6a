package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// selectableFields lists, per kind, the fields beyond metadata.name and
// metadata.namespace that list and watch accept in a field selector.
var selectableFields = map[string][]string{
	"Node":         {"spec.pool", "spec.resourceClass", "status.provisionState", "status.reservation"},
	"Allocation":   {"status.state", "status.node"},
	"Reservation":  {"spec.project", "status.state", "status.node"},
	"ReservedHost": {"status.reservation.state", "status.pool"},
	"AccessToken":  {"spec.user"},
	"Execution":    {"spec.pool", "status.phase", "status.host"},
}

// SelectableFields returns the extra selectable fields of kind.
func SelectableFields(kind string) []string { return selectableFields[kind] }

func addFieldLabelConversions(scheme *runtime.Scheme) error {
	for _, kind := range []string{"Project", "Pool", "Node", "Allocation", "Reservation", "ReservedHost", "AccessToken", "EnrollmentToken", "Execution", "HostLending"} {
		allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
		for _, f := range selectableFields[kind] {
			allowed[f] = true
		}
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
			if allowed[label] {
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label %q is not supported for %s", label, kind)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
