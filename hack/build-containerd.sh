#!/usr/bin/env bash
# Builds containerd 2 (CRI with CDI), containerd-shim-runc-v2 and ctr from the
# pinned module hack/containerd into bin/containerd, for hack/local-cluster.
# A stamp keyed on hack/containerd/go.sum (and the Go version) makes a rebuild a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/containerd
mod=$root/hack/containerd
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
ver=$(grep -oE "github.com/containerd/containerd/v2 v[0-9][^ ]*" "$mod/go.mod" | head -1 | cut -d" " -f2)
key=$( (cat "$mod/go.sum" "$mod/go.mod"; go version) | sha256sum | cut -c1-16)
stamp=$out/.stamp
if [ -x "$out/containerd" ] && [ -x "$out/containerd-shim-runc-v2" ] && [ -x "$out/ctr" ] &&
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
echo "building containerd $ver (first time only; a few minutes on 2 cores)"
start=$(date +%s)
(cd "$mod" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$ver" -o "$out/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr)
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built containerd in $(( $(date +%s) - start ))s"
