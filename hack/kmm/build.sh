#!/usr/bin/env bash
# Builds KMM's manager (cmd/manager of the pinned module hack/kmm) into
# bin/kmm/manager, and the no-op images' binary (hack/kmm/noop) into
# bin/kmm/noop, for hack/kmm/run.sh. A stamp keyed on hack/kmm's go.sum, the
# no-op's source and the Go version makes a rebuild a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mod=$root/hack/kmm
out=$root/bin/kmm
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
# The manager must be the KMM whose API Slicer renders (the main go.mod's pin).
want=$(grep -oE "github.com/rh-ecosystem-edge/kernel-module-management v[^ ]+" "$root/go.mod" | head -1 | cut -d" " -f2)
have=$(grep -oE "github.com/rh-ecosystem-edge/kernel-module-management v[^ ]+" "$mod/go.mod" | head -1 | cut -d" " -f2)
[ "$want" = "$have" ] || { echo "hack/kmm pins KMM $have but go.mod pins $want: update hack/kmm/go.mod" >&2; exit 1; }
key=$( (cat "$mod/go.mod" "$mod/go.sum" "$mod"/noop/*.go; go version) | sha256sum | cut -c1-16)
stamp=$out/.stamp
if [ -x "$out/manager" ] && [ -x "$out/noop" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
echo "building the KMM manager (first time only; a few minutes on 2 cores)"
start=$(date +%s)
(cd "$mod" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$out/manager" \
  github.com/rh-ecosystem-edge/kernel-module-management/cmd/manager)
(cd "$mod" && CGO_ENABLED=0 nice -n 19 go build -trimpath -ldflags "-s -w" -o "$out/noop" ./noop)
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built the KMM manager and the no-op in $(( $(date +%s) - start ))s"
