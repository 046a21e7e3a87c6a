package server

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/namespace"
)

// NewScheme registers nodus.dev/v1 (also as its own internal version) and the
// core Namespace types that the namespaces projection serves.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	core := schema.GroupVersion{Version: "v1"}
	coreInternal := schema.GroupVersion{Version: runtime.APIVersionInternal}
	scheme.AddKnownTypes(core, &corev1.Namespace{}, &corev1.NamespaceList{})
	scheme.AddKnownTypes(coreInternal, &corev1.Namespace{}, &corev1.NamespaceList{})
	// The fields of a namespace a selector may name, as kube-apiserver's;
	// the projection answers the phase itself.
	err := scheme.AddFieldLabelConversionFunc(core.WithKind("Namespace"), func(label, value string) (string, string, error) {
		if label == "metadata.name" || label == namespace.PhaseField {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label %q is not supported for namespaces", label)
	})
	if err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, core)
	scheme.AddUnversionedTypes(core, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
	return scheme, nil
}
