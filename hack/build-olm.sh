#!/usr/bin/env bash
# Builds Operator Lifecycle Manager v0 (olm, catalog) and our catalog-server and render-catalog
# from the pinned module hack/olm into bin/olm, for the OLM end-to-end suite (test/olm).
# -tags containers_image_openpgp: OLM's image code (go.podman.io/image) otherwise needs libgpgme
# through cgo. A stamp keyed on hack/olm (go.mod, go.sum, our commands) and the Go version makes
# a rebuild a no-op.
# No -trimpath: the packages test-nested compiled for hack/olm's tests (same tags) are reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/olm
mod=$root/hack/olm
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
key=$( (cd "$mod" && find . -name '*.go' -o -name 'go.mod' -o -name 'go.sum' | LC_ALL=C sort | xargs cat; go version) |
  sha256sum | cut -c1-16)
stamp=$out/.stamp
bins=(olm catalog catalog-server render-catalog)
fresh=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || fresh=0; done
if [ $fresh = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
ver=$(awk '$1=="github.com/operator-framework/operator-lifecycle-manager"{print $2; exit}' "$mod/go.mod")
echo "building OLM $ver (first time only; about 5 minutes on 2 cores)"
start=$(date +%s)
(cd "$mod" && go build -tags containers_image_openpgp -ldflags "-s -w" -o "$out/" \
  github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
  github.com/operator-framework/operator-lifecycle-manager/cmd/catalog \
  ./cmd/catalog-server ./cmd/render-catalog)
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built OLM in $(( $(date +%s) - start ))s"
