#!/usr/bin/env bash
# hack/build-released.sh VERSION: builds the component binaries of a released version from that
# release's own source (the commit recorded in hack/bundle/released/VERSION/commit, exported
# with git archive) into bin/released/VERSION, for the OLM upgrade test (test/olm), which must
# run the released code, not today's relabelled. A stamp keyed on the commit and the Go version
# makes a rebuild a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: hack/build-released.sh VERSION}
commit=$(cat "$root/hack/bundle/released/$version/commit")
out=$root/bin/released/$version
bins=(slicer-operator slicer-scheduler slicer-webhook slicer-agent)
key=$( (echo "$commit"; go version) | sha256sum | cut -c1-16)
stamp=$out/.stamp
fresh=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || fresh=0; done
if [ $fresh = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
echo "building Slicer $version from ${commit:0:12} (first time only; a few minutes on 2 cores)"
start=$(date +%s)
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git -C "$root" archive "$commit" | tar -x -C "$src"
mkdir -p "$out"
(cd "$src" && GOFLAGS=-mod=readonly go build -trimpath -o "$out/" \
  ./operator/cmd/slicer-operator ./scheduler/cmd/slicer-scheduler \
  ./webhook/cmd/slicer-webhook ./device-plugin/cmd/slicer-agent)
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built Slicer $version in $(( $(date +%s) - start ))s"
