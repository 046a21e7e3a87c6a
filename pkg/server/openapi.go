package server

import (
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/nodus-dev/nodus/pkg/generated/openapi"
)

// openAPIDefinitions adds the few core types of the namespaces projection to
// the generated definitions, instead of generating all of core/v1.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := openapi.GetOpenAPIDefinitions(ref)
	str := func(desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: desc}}
	}
	refTo := func(name, desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name), Description: desc}}
	}
	arrayOf := func(item spec.Schema, desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"array"}, Description: desc, Items: &spec.SchemaOrArray{Schema: &item}}}
	}
	object := func(desc string, props map[string]spec.Schema, deps ...string) common.OpenAPIDefinition {
		return common.OpenAPIDefinition{
			Schema:       spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Description: desc, Properties: props}},
			Dependencies: deps,
		}
	}
	const (
		objectMeta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
		listMeta   = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
		time       = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
		ns         = "io.k8s.api.core.v1.Namespace"
	)
	defs[ns] = object("Namespace is the read-only view of a Nodus Project.", map[string]spec.Schema{
		"apiVersion": str("APIVersion of the object."),
		"kind":       str("Kind of the object."),
		"metadata":   refTo(objectMeta, "Standard object metadata."),
		"spec":       refTo(ns+"Spec", "Spec of the namespace."),
		"status":     refTo(ns+"Status", "Status of the namespace."),
	}, objectMeta, ns+"Spec", ns+"Status")
	defs[ns+"List"] = object("NamespaceList lists the projects visible to the caller.", map[string]spec.Schema{
		"apiVersion": str("APIVersion of the list."),
		"kind":       str("Kind of the list."),
		"metadata":   refTo(listMeta, "Standard list metadata."),
		"items":      arrayOf(refTo(ns, ""), "The namespaces."),
	}, listMeta, ns)
	defs[ns+"Spec"] = object("NamespaceSpec is empty for projected namespaces.", map[string]spec.Schema{
		"finalizers": arrayOf(str(""), "Finalizers of the namespace."),
	})
	defs[ns+"Status"] = object("NamespaceStatus is the phase of the namespace.", map[string]spec.Schema{
		"phase":      str("Phase is Active, or Terminating while the project is deleted."),
		"conditions": arrayOf(refTo(ns+"Condition", ""), "Conditions of the namespace."),
	}, ns+"Condition")
	defs[ns+"Condition"] = object("NamespaceCondition is a condition of a namespace.", map[string]spec.Schema{
		"type":               str("Type of the condition."),
		"status":             str("Status of the condition."),
		"lastTransitionTime": refTo(time, "Last time the condition changed."),
		"reason":             str("Reason of the last change."),
		"message":            str("Message of the last change."),
	}, time)
	return defs
}
