#!/usr/bin/env bash
# Builds control-plane binaries from the pinned module hack/k8s-bin into bin/k8s.
# usage: hack/build-k8s-bin.sh COMPONENT...   (kube-apiserver etcd kube-controller-manager kubectl kubelet)
# With K8S_MINOR=1.N set (an older supported minor) it builds from hack/k8s-bin-1.N into
# bin/k8s-1.N instead; those modules pin only kube-apiserver and etcd (docs/design/k8s-minors.md).
# A stamp keyed on the module's go.sum (and the Go version) makes a rebuild a no-op.
# No -trimpath (it is part of every package's build cache key): the main minor's kube-apiserver
# and node binaries then reuse the packages `make verify` compiled for the main module, which
# pins the same versions (docs/ci.md). -s -w and -X act on the link only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
suffix=${K8S_MINOR:+-$K8S_MINOR}
out=$root/bin/k8s$suffix
mod=$root/hack/k8s-bin$suffix
[ -f "$mod/go.mod" ] || { echo "no module $mod for K8S_MINOR=${K8S_MINOR:-}" >&2; exit 1; }
mkdir -p "$out"
# One build of this output at a time: .ci/run builds it ahead in the background (make
# ci-prebuild); a second caller waits here, then finds the stamp.
exec 9<"$out"; flock 9
ver=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$mod/go.mod")
minor=$(echo "$ver" | cut -d. -f2)
key=$( (cat "$mod/go.sum" "$mod/go.mod"; go version) | sha256sum | cut -c1-16)
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done
for c in "$@"; do
  stamp=$out/.$c.stamp
  if [ -x "$out/$c" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    continue
  fi
  echo "building $c $ver (first time only; a few minutes on 2 cores)"
  start=$(date +%s)
  case $c in
    etcd) (cd "$mod" && go build -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3) ;;
    *) (cd "$mod" && go build -ldflags "$ldflags" -o "$out/$c" "k8s.io/kubernetes/cmd/$c") ;;
  esac
  # A new file, not the old one rewritten: bin/ may be hard-linked from another clone's.
  rm -f "$stamp"; echo "$key" >"$stamp"
  echo "built $c in $(( $(date +%s) - start ))s"
done
