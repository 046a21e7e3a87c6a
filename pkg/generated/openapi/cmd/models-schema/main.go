// Command models-schema prints the OpenAPI v2 definitions of the generated
// OpenAPI code, which applyconfiguration-gen reads to give the apply
// configurations their structured-merge schema.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

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
