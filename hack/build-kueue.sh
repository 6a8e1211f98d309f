#!/usr/bin/env bash
# Builds Kueue's manager (cmd/kueue of the pinned module hack/kueue) into bin/kueue/kueue, for
# the end-to-end suite's Kueue spec (test/e2e/kueue_test.go starts it on the local node), and
# copies the same release's own CRDs (config/components/crd/bases) and webhook configurations
# (config/components/webhook/manifests.yaml) next to it, into bin/kueue/config: the suite
# installs those, never a hand-copied version. Only the manager is built. A stamp keyed on
# hack/kueue's go.mod and go.sum and the Go version makes a rebuild a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/hack/kueue
out=$root/bin/kueue
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
ver=$(grep -oE "sigs.k8s.io/kueue v[0-9][^ ]*" "$mod/go.mod" | head -1 | cut -d" " -f2)
key=$( (cat "$mod/go.mod" "$mod/go.sum"; go version) | sha256sum | cut -c1-16)
stamp=$out/.stamp
if [ -x "$out/kueue" ] && [ -f "$out/config/webhook/manifests.yaml" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
  exit 0
fi
echo "building Kueue $ver's manager (first time only; a few minutes on 2 cores)"
start=$(date +%s)
# Kueue's Makefile stamps the version into pkg/version (its LD_FLAGS).
(cd "$mod" && CGO_ENABLED=0 nice -n 19 go build -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$ver" -o "$out/kueue" \
  sigs.k8s.io/kueue/cmd/kueue)
src=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$out/config"
mkdir -p "$out/config/crd" "$out/config/webhook"
cp "$src"/config/components/crd/bases/*.yaml "$out/config/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$out/config/webhook/"
chmod -R u+w "$out/config"
# A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
rm -f "$stamp"; echo "$key" >"$stamp"
echo "built Kueue's manager in $(( $(date +%s) - start ))s"
