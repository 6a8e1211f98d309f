#!/usr/bin/env bash
# Assemble the component images without a container engine, from binaries
# built on this machine (make build), for the local cluster:
#   images/local.sh [OUT_DIR]   -> OUT_DIR/slicer-<component>.tar (default .local/images)
# Each archive is an OCI image named $IMAGE_REPO/slicer-<component>:$IMAGE_TAG
# (default localhost/slicer-<component>:dev) that `ctr -n k8s.io images import`
# accepts; the scheduler has one image per supported Kubernetes minor,
# $IMAGE_REPO/slicer-scheduler:$IMAGE_TAG-k8s-1.N, from
# bin/slicer-scheduler-k8s-1.N (make build-schedulers; an older minor not built
# is skipped with a note; the main module's minor, the local node's, comes from
# make build's bin/slicer-scheduler). The labels, entrypoint, binary path and
# USER are read from images/<component>.Containerfile (VERSION, the version
# label, from $VERSION, default the Makefile's), so both ways of building give
# the same image: /usr/local/bin/slicer-<component>, /licenses, the same
# config; mkimage refuses an image that fails the certification checks
# (hack/tools/mkimage/check.go). Prints "ARCHIVE NAME DIGEST" per image. An archive whose
# inputs did not change since it was assembled is reused (see assemble).
# Uses bin/tools/mkimage (hack/tools/mkimage, go-containerregistry).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.local/images}
IMAGE_REPO=${IMAGE_REPO:-localhost}
IMAGE_TAG=${IMAGE_TAG:-dev}
VERSION=${VERSION:-$(sed -n 's/^VERSION *?= *//p' "$ROOT/Makefile")}
MKIMAGE=$ROOT/bin/tools/mkimage
[ -x "$MKIMAGE" ] || { echo "images/local.sh: $MKIMAGE missing (build hack/tools/mkimage)" >&2; exit 1; }
mkdir -p "$OUT"

# assemble COMPONENT SUFFIX BINARY: OUT/slicer-COMPONENT[SUFFIX].tar, image
# $IMAGE_REPO/slicer-COMPONENT:$IMAGE_TAG[SUFFIX]
assemble() {
  local c=$1 suffix=$2 bin=$3 cf=$ROOT/images/$1.Containerfile entry
  [ -x "$bin" ] || { echo "images/local.sh: $bin missing (make build)" >&2; exit 1; }
  entry=/usr/local/bin/slicer-$c
  grep -qx "ENTRYPOINT \[\"$entry\"\]" "$cf" || { echo "images/local.sh: $cf's ENTRYPOINT is not [\"$entry\"]" >&2; exit 1; }
  # An archive is assembled again only when what it is made from changed (each end-to-end
  # suite brings its node up with these images; assembling all six takes about 18 s): the key
  # covers the name, VERSION, the binary, the shared libraries -libs copies (what ldd resolves,
  # as hack/tools/mkimage/libs_test.go checks), the Containerfile, the licence and mkimage
  # itself. The stamp keeps mkimage's line for the archive, printed again when it is reused.
  local out=$OUT/slicer-$c$suffix.tar stamp key
  stamp=$OUT/.slicer-$c$suffix.key
  key=$({
    echo "$IMAGE_REPO/slicer-$c:$IMAGE_TAG$suffix VERSION=$VERSION"
    sha256sum "$bin" "$cf" "$ROOT/images/licenses/LICENSE" "$MKIMAGE"
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | xargs -r sha256sum
  } | sha256sum | cut -d' ' -f1)
  if [ -s "$out" ] && [ -s "$stamp" ] && [ "$(head -n 1 "$stamp")" = "$key" ]; then
    tail -n +2 "$stamp"
    return
  fi
  rm -f "$stamp"
  # The binaries are cgo builds: -libs adds the loader and shared libraries.
  local line
  line=$("$MKIMAGE" -o "$out" -name "$IMAGE_REPO/slicer-$c:$IMAGE_TAG$suffix" \
    -containerfile "$cf" -build-arg "VERSION=$VERSION" -libs \
    -file "$entry=$bin" -file "/licenses/LICENSE=$ROOT/images/licenses/LICENSE" -dir /tmp)
  printf '%s\n%s\n' "$key" "$line" >"$stamp"
  printf '%s\n' "$line"
}

for c in operator webhook agent; do
  assemble "$c" "" "$ROOT/bin/slicer-$c"
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
  assemble scheduler "-k8s-$m" "$bin"
done
