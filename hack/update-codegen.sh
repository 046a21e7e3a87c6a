#!/usr/bin/env bash
# Regenerates deepcopy, defaulters, OpenAPI definitions, and the typed
# clientset, listers, informers and apply configurations for nodus.dev/v1.
# The generators are pinned as `tool` dependencies in go.mod, so this runs
# offline once the module cache is warm and always uses the versions the
# server is built with.
#
# OUTPUT_ROOT (default: the repository) lets hack/verify-codegen.sh generate
# into a scratch copy.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
OUT=${OUTPUT_ROOT:-$ROOT}
cd "$OUT"

MODULE=$(go list -m)
APIS="$MODULE/pkg/apis/nodus/v1"
GEN="$MODULE/pkg/generated"
HEADER="$ROOT/hack/boilerplate.go.txt"
BIN="$OUT/_output/bin"
mkdir -p "$BIN"
for tool in deepcopy-gen defaulter-gen openapi-gen client-gen lister-gen informer-gen applyconfiguration-gen; do
	go build -o "$BIN/$tool" "$(go list -f '{{.ImportPath}}' tool | grep "/$tool\$")"
done

rm -f pkg/apis/nodus/v1/zz_generated.*.go
rm -rf pkg/generated/openapi/zz_generated.*.go pkg/generated/clientset pkg/generated/listers \
	pkg/generated/informers pkg/generated/applyconfiguration

"$BIN/deepcopy-gen" --go-header-file "$HEADER" --output-file zz_generated.deepcopy.go "$APIS"
"$BIN/defaulter-gen" --go-header-file "$HEADER" --output-file zz_generated.defaults.go "$APIS"
"$BIN/openapi-gen" --go-header-file "$HEADER" --output-file zz_generated.openapi.go \
	--output-dir pkg/generated/openapi --output-pkg "$GEN/openapi" \
	--output-model-name-file zz_generated.model_name.go \
	--report-filename "$OUT/_output/api-violations.list" \
	k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime \
	k8s.io/apimachinery/pkg/version k8s.io/apimachinery/pkg/api/resource "$APIS"

"$BIN/applyconfiguration-gen" --go-header-file "$HEADER" \
	--output-dir pkg/generated/applyconfiguration --output-pkg "$GEN/applyconfiguration" \
	--openapi-schema <(go run ./pkg/generated/openapi/cmd/models-schema) "$APIS"
"$BIN/client-gen" --go-header-file "$HEADER" \
	--output-dir pkg/generated/clientset --output-pkg "$GEN/clientset" \
	--clientset-name versioned --input-base "" --input "$APIS" \
	--apply-configuration-package "$GEN/applyconfiguration" --prefers-protobuf=false
"$BIN/lister-gen" --go-header-file "$HEADER" \
	--output-dir pkg/generated/listers --output-pkg "$GEN/listers" "$APIS"
"$BIN/informer-gen" --go-header-file "$HEADER" \
	--output-dir pkg/generated/informers --output-pkg "$GEN/informers" \
	--versioned-clientset-package "$GEN/clientset/versioned" --listers-package "$GEN/listers" "$APIS"
