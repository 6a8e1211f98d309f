#!/usr/bin/env bash
# Assemble the component images without a container engine, from binaries
# built on this machine (make build), for the local cluster:
#   images/local.sh [OUT_DIR]   -> OUT_DIR/slicer-<component>.tar (default .local/images)
# Each archive is an OCI image named localhost/slicer-<component>:dev that
# `ctr -n k8s.io images import` accepts. The entrypoint, binary path and USER
# are read from images/<component>.Containerfile, so both ways of building
# give the same image layout: /usr/local/bin/slicer-<component>, /licenses.
# Uses bin/tools/mkimage (hack/tools/mkimage, go-containerregistry).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.local/images}
MKIMAGE=$ROOT/bin/tools/mkimage
[ -x "$MKIMAGE" ] || { echo "images/local.sh: $MKIMAGE missing (build hack/tools/mkimage)" >&2; exit 1; }
mkdir -p "$OUT"
for c in operator scheduler webhook agent; do
  cf=$ROOT/images/$c.Containerfile
  bin=$ROOT/bin/slicer-$c
  [ -x "$bin" ] || { echo "images/local.sh: $bin missing (make build)" >&2; exit 1; }
  entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' "$cf")
  user=$(sed -n 's/^USER \([0-9:]*\)$/\1/p' "$cf" | tail -1)
  [ -n "$entry" ] && [ -n "$user" ] || { echo "images/local.sh: no ENTRYPOINT/USER in $cf" >&2; exit 1; }
  # The binaries are cgo builds: -libs adds the loader and shared libraries.
  "$MKIMAGE" -o "$OUT/slicer-$c.tar" -name "localhost/slicer-$c:dev" \
    -entrypoint "$entry" -user "$user" -libs \
    -file "$entry=$bin" -file "/licenses/LICENSE=$ROOT/images/licenses/LICENSE" -dir /tmp
  echo "$OUT/slicer-$c.tar"
done
