// Command models-schema prints the OpenAPI v2 definitions of the generated
// OpenAPI code, which applyconfiguration-gen reads to give the apply
// configurations their structured-merge schema.
//
// The definitions are named by the types' OpenAPI model names
// (dev.nodus.v1.Node), as the server publishes them and as the scheme
// names them to the apply configurations' type converter. The generator
// looks each applied kind up by its Go name
// (com.github.nodus-dev.nodus.pkg.apis.nodus.v1.Node), and the Extract
// functions it writes read the kind by that name, while it keeps only the
// kinds it found and what they refer to. So each kind is also printed
// under its Go name: a copy of its model's schema (a bare reference would
// be resolved away, and the name with it), all of its model (which keeps
// the model among the definitions referred to). Until session 56 only the
// model names were printed: the generator found none of the kinds and gave
// each an untyped schema, and the type converter typed none of them.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/openapi"
)

func main() {
	if err := printSchema(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func printSchema() error {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		// Prefer an embedded v2 schema so that the output is always OpenAPI v2.
		if embedded, ok := def.Schema.Extensions[common.ExtensionV2Schema]; ok {
			if v2, ok := embedded.(spec.Schema); ok {
				schemas[name] = v2
				continue
			}
		}
		schemas[name] = def.Schema
	}
	aliases, err := goNames()
	if err != nil {
		return err
	}
	for goName, model := range aliases {
		if schema, ok := schemas[model]; ok {
			schema.AllOf = []spec.Schema{{SchemaProps: spec.SchemaProps{Ref: ref(model)}}}
			schemas[goName] = schema
		}
	}
	data, err := json.Marshal(&spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Definitions: schemas,
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "Nodus", Version: "v1"}},
		Swagger:     "2.0",
	}})
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(data)
	return err
}

// goNames maps the Go name of each kind of nodus.dev/v1 to its model name,
// where they differ.
func goNames() (map[string]string, error) {
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	names := map[string]string{}
	for kind, t := range scheme.KnownTypes(nodusv1.SchemeGroupVersion) {
		model, err := scheme.ToOpenAPIDefinitionName(nodusv1.SchemeGroupVersion.WithKind(kind))
		if err != nil {
			return nil, err
		}
		if goName := util.ToRESTFriendlyName(t.PkgPath() + "." + t.Name()); goName != model {
			names[goName] = model
		}
	}
	return names, nil
}
