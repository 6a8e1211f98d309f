#!/usr/bin/env bash
# Builds Node Feature Discovery's nfd-master and nfd-worker from the pinned module hack/nfd
# into bin/nfd, for the local node (hack/nfd-node). Same flags as NFD's own `make build`
# (static, version stamped, host paths unprefixed: the worker reads /sys, which hack/nfd-node
# replaces in the worker's own mount namespace). A stamp keyed on hack/nfd/go.sum (and the Go
# version) makes a rebuild a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/nfd
mod=$root/hack/nfd
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
ver=$(grep -oE "sigs.k8s.io/node-feature-discovery v[0-9][^ ]*" "$mod/go.mod" | head -1 | cut -d" " -f2)
key=$( (cat "$mod/go.sum" "$mod/go.mod"; go version) | sha256sum | cut -c1-16)
stamp=$out/.stamp
if [ -x "$out/nfd-master" ] && [ -x "$out/nfd-worker" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
echo "building NFD $ver nfd-master and nfd-worker (first time only; a few minutes on 2 cores)"
start=$(date +%s)
(cd "$mod" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$ver" -o "$out/" \
  sigs.k8s.io/node-feature-discovery/cmd/nfd-master \
  sigs.k8s.io/node-feature-discovery/cmd/nfd-worker)
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built NFD in $(( $(date +%s) - start ))s"
