#!/usr/bin/env bash
# Fails when the committed generated code differs from what
# hack/update-codegen.sh produces now.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# Copy the tracked and untracked (not ignored) files: generation must depend
# only on what a clean clone has.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$SCRATCH" 2>/dev/null || true)
OUTPUT_ROOT="$SCRATCH" "$ROOT/hack/update-codegen.sh" >/dev/null

status=0
for dir in pkg/apis/nodus/v1 pkg/generated; do
	if ! diff -r -q -x '_output' "$ROOT/$dir" "$SCRATCH/$dir"; then
		status=1
	fi
done
if [ "$status" -ne 0 ]; then
	echo "generated code is stale: run hack/update-codegen.sh and commit the result" >&2
	exit 1
fi
echo "generated code is up to date"
