#!/usr/bin/env bash
# `make verify`'s check of generated files: snapshot every generated path,
# regenerate, and fail if anything changed (a hand edit, committed or not, or a
# generator input changed without regenerating), if a generator left a new file
# behind, or if a Go file is not gofmt-clean. Hand edits are reported, then
# replaced by the generated content.
set -euo pipefail
cd "$(dirname "$0")/.."
# Generated paths and the make targets that produce them.
generated=(api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/crd/external config/rbac docs/metrics.md bundle charts/slicer)
targets=(generate manifests external-crds metrics-doc bundle chart)

snap=$(mktemp -d)
trap 'rm -rf "$snap"' EXIT
for p in "${generated[@]}"; do
  [ -e "$p" ] || continue
  mkdir -p "$snap/$(dirname "$p")"
  cp -a "$p" "$snap/$p"
done
make --no-print-directory "${targets[@]}" >/dev/null

status=0
for p in "${generated[@]}"; do
  if ! diff -r -q "$snap/$p" "$p" >/dev/null 2>&1; then
    echo "generated file(s) under $p differ from what the generators produce (hand edit or stale output):" >&2
    diff -r -u "$snap/$p" "$p" | head -40 >&2 || true
    status=1
  fi
done
untracked=$(git ls-files --others --exclude-standard -- "${generated[@]}")
if [ -n "$untracked" ]; then
  echo "generators produced files that are not committed:" >&2
  echo "$untracked" >&2
  status=1
fi
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "not gofmt-clean:" >&2
  echo "$unformatted" >&2
  status=1
fi
[ $status -eq 0 ] && echo "generated files are up to date"
exit $status
