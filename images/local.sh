#!/usr/bin/env bash
# Assemble the component images without a container engine, from binaries
# built on this machine (make build), for the local cluster:
#   images/local.sh [OUT_DIR]   -> OUT_DIR/slicer-<component>.tar (default .local/images)
# Each archive is an OCI image named localhost/slicer-<component>:dev that
# `ctr -n k8s.io images import` accepts; the scheduler has one image per
# supported Kubernetes minor, localhost/slicer-scheduler:dev-k8s-1.N, from
# bin/slicer-scheduler-k8s-1.N (make build-schedulers; an older minor not built
# is skipped with a note; the main module's minor, the local node's, comes from
# make build's bin/slicer-scheduler). The entrypoint, binary path and USER
# are read from images/<component>.Containerfile, so both ways of building
# give the same image layout: /usr/local/bin/slicer-<component>, /licenses.
# Uses bin/tools/mkimage (hack/tools/mkimage, go-containerregistry).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.local/images}
MKIMAGE=$ROOT/bin/tools/mkimage
[ -x "$MKIMAGE" ] || { echo "images/local.sh: $MKIMAGE missing (build hack/tools/mkimage)" >&2; exit 1; }
mkdir -p "$OUT"

# assemble COMPONENT TAG BINARY: OUT/slicer-COMPONENT[-TAG-suffix].tar
assemble() {
  local c=$1 tag=$2 bin=$3 cf=$ROOT/images/$1.Containerfile entry user archive
  [ -x "$bin" ] || { echo "images/local.sh: $bin missing (make build)" >&2; exit 1; }
  entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' "$cf")
  user=$(sed -n 's/^USER \([0-9:]*\)$/\1/p' "$cf" | tail -1)
  [ -n "$entry" ] && [ -n "$user" ] || { echo "images/local.sh: no ENTRYPOINT/USER in $cf" >&2; exit 1; }
  archive=$OUT/slicer-$c${tag#dev}.tar
  # The binaries are cgo builds: -libs adds the loader and shared libraries.
  "$MKIMAGE" -o "$archive" -name "localhost/slicer-$c:$tag" \
    -entrypoint "$entry" -user "$user" -libs \
    -file "$entry=$bin" -file "/licenses/LICENSE=$ROOT/images/licenses/LICENSE" -dir /tmp
  echo "$archive"
}

for c in operator webhook agent; do
  assemble "$c" dev "$ROOT/bin/slicer-$c"
done
# The supported minors, where the Makefile finds them (docs/design/k8s-minors.md).
main_minor=$(awk '$1=="k8s.io/kubernetes"{split(substr($2,2),v,"."); print v[1]"."v[2]; exit}' "$ROOT/go.mod")
for m in $(cd "$ROOT/scheduler" && ls -d k8s-1.*/go.mod 2>/dev/null | sed 's,^k8s-,,; s,/go.mod$,,') "$main_minor"; do
  bin=$ROOT/bin/slicer-scheduler-k8s-$m
  if [ "$m" = "$main_minor" ]; then
    bin=$ROOT/bin/slicer-scheduler # the same build as make build-schedulers', and make build keeps it fresh
  elif [ ! -x "$bin" ]; then
    echo "images/local.sh: $bin not built (make build-schedulers): no image for Kubernetes $m" >&2
    continue
  fi
  assemble scheduler "dev-k8s-$m" "$bin"
done
