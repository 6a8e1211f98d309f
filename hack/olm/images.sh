#!/usr/bin/env bash
# hack/olm/images.sh OUT_DIR: the released v0.1.0's component images, under the exact names its
# CSV references, as OCI archives for `hack/local-cluster load`, for the OLM suite's
# OLM_FROM=released path (test/olm; the current and "previous" images come from
# images/local.sh):
#   quay.io/slicer-operator/slicer-{operator,scheduler,webhook,agent}:v0.1.0
#       from bin/released/0.1.0 (hack/build-released.sh: the v0.1.0 source), laid out as that
#       release's images/<component>.Containerfile says.
# Uses bin/tools/mkimage.
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

