#!/usr/bin/env bash
# Fails when regeneration changed a tracked file or left an untracked one, or
# when a Go file is not gofmt-clean. Run by `make verify` after every generator.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if ! git diff --quiet --exit-code; then
  echo "generated files are stale or were edited by hand; run 'make generate manifests external-crds' and commit:" >&2
  git --no-pager diff --stat >&2
  status=1
fi
untracked=$(git ls-files --others --exclude-standard)
if [ -n "$untracked" ]; then
  echo "untracked files after regeneration (commit or delete them):" >&2
  echo "$untracked" >&2
  status=1
fi
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "not gofmt-clean:" >&2
  echo "$unformatted" >&2
  status=1
fi
exit $status
