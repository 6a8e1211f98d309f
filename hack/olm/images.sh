#!/usr/bin/env bash
# hack/olm/images.sh OUT_DIR: the component images of the two bundles the OLM suite (test/olm)
# installs, under the exact names their CSVs reference, as OCI archives for
# `hack/local-cluster load`:
#   quay.io/slicer-operator/slicer-{operator,scheduler,webhook,agent}:v0.1.0
#       from bin/released/0.1.0 (hack/build-released.sh: the v0.1.0 source), laid out as that
#       release's images/<component>.Containerfile says;
#   quay.io/slicer-operator/slicer-{operator,webhook,agent}:v$VERSION and
#   slicer-scheduler:v$VERSION-k8s-<main minor> from bin/ (make build), as images/local.sh
#       assembles them.
# VERSION is hack/bundle/release.yaml's. Uses bin/tools/mkimage.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: hack/olm/images.sh OUT_DIR}
MKIMAGE=$ROOT/bin/tools/mkimage
REGISTRY=quay.io/slicer-operator
[ -x "$MKIMAGE" ] || { echo "hack/olm/images.sh: $MKIMAGE missing" >&2; exit 1; }
mkdir -p "$OUT"

# assemble COMPONENT TAG BINARY CONTAINERFILE_TEXT
assemble() {
  local c=$1 tag=$2 bin=$3 cf=$4 entry user
  [ -x "$bin" ] || { echo "hack/olm/images.sh: $bin missing" >&2; exit 1; }
  entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]$/\1/p' <<<"$cf")
  user=$(sed -n 's/^USER \([0-9:]*\)$/\1/p' <<<"$cf" | tail -1)
  [ -n "$entry" ] && [ -n "$user" ] || { echo "hack/olm/images.sh: no ENTRYPOINT/USER for $c" >&2; exit 1; }
  "$MKIMAGE" -o "$OUT/slicer-$c-$tag.tar" -name "$REGISTRY/slicer-$c:$tag" \
    -entrypoint "$entry" -user "$user" -libs \
    -file "$entry=$bin" -file "/licenses/LICENSE=$ROOT/images/licenses/LICENSE" -dir /tmp
  echo "$OUT/slicer-$c-$tag.tar"
}

released=0.1.0
commit=$(cat "$ROOT/hack/bundle/released/$released/commit")
for c in operator scheduler webhook agent; do
  assemble "$c" "v$released" "$ROOT/bin/released/$released/slicer-$c" "$(git -C "$ROOT" show "$commit:images/$c.Containerfile")"
done

version=$(awk '$1=="version:"{print $2}' "$ROOT/hack/bundle/release.yaml")
main_minor=$(awk '$1=="k8s.io/kubernetes"{split(substr($2,2),v,"."); print v[1]"."v[2]; exit}' "$ROOT/go.mod")
for c in operator webhook agent; do
  assemble "$c" "v$version" "$ROOT/bin/slicer-$c" "$(cat "$ROOT/images/$c.Containerfile")"
done
assemble scheduler "v$version-k8s-$main_minor" "$ROOT/bin/slicer-scheduler" "$(cat "$ROOT/images/scheduler.Containerfile")"
