#!/usr/bin/env bash
# Regenerates the protobuf encoding (generated.proto, generated.pb.go and the
# protobuf struct tags of the types), deepcopy, defaulters, OpenAPI
# definitions, and the typed clientset, listers, informers and apply
# configurations for nodus.dev/v1. The protobuf step needs protoc (Debian:
# protobuf-compiler).
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
if ! command -v protoc >/dev/null; then
	echo "hack/update-codegen.sh: protoc is not installed (Debian: apt-get install protobuf-compiler)" >&2
	exit 1
fi
for tool in go-to-protobuf protoc-gen-gogo goimports deepcopy-gen defaulter-gen openapi-gen client-gen lister-gen informer-gen applyconfiguration-gen; do
	go build -o "$BIN/$tool" "$(go list -f '{{.ImportPath}}' tool | grep "/$tool\$")"
done

rm -f pkg/apis/nodus/v1/zz_generated.*.go
rm -rf pkg/generated/openapi/zz_generated.*.go pkg/generated/clientset pkg/generated/listers \
	pkg/generated/informers pkg/generated/applyconfiguration

# go-to-protobuf reads and writes packages in a GOPATH-shaped tree: this
# module and the modules whose .proto files ours import, linked from the
# module cache.
PROTO_SRC="$OUT/_output/proto-src"
rm -rf "$PROTO_SRC"
link() { mkdir -p "$(dirname "$PROTO_SRC/$1")" && ln -s "$2" "$PROTO_SRC/$1"; }
link "$MODULE" "$OUT"
link k8s.io/apimachinery "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)"
GOGO=$(go list -m -f '{{.Dir}}' github.com/gogo/protobuf)
link github.com/gogo/protobuf "$GOGO"
APIMACHINERY=-k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1
PATH="$BIN:$PATH" "$BIN/go-to-protobuf" --go-header-file "$HEADER" --output-dir "$PROTO_SRC" \
	--proto-import "$GOGO/protobuf" --apimachinery-packages "$APIMACHINERY" --packages "$APIS"
rm -rf "$PROTO_SRC"

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
