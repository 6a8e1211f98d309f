#!/usr/bin/env bash
# Copies the third-party CRDs Slicer's tests install (NFD, KMM, Prometheus
# operator) from their pinned modules in the Go module cache into
# config/crd/external. Versions: KMM and NFD as pinned in go.mod; the
# Prometheus operator's CRDs from the version below (a download only: it does
# not enter go.mod). `make verify` re-runs this and fails on any difference.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=config/crd/external
PROMETHEUS_OPERATOR_VERSION=v0.85.0
nfd_version=$(go list -m -f '{{.Version}}' sigs.k8s.io/node-feature-discovery/api/nfd)
moddir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
kmm=$(go list -m -f '{{.Dir}}' github.com/rh-ecosystem-edge/kernel-module-management)
[ -n "$kmm" ] || { go mod download github.com/rh-ecosystem-edge/kernel-module-management; kmm=$(go list -m -f '{{.Dir}}' github.com/rh-ecosystem-edge/kernel-module-management); }
nfd=$(moddir "sigs.k8s.io/node-feature-discovery@$nfd_version")
prom=$(moddir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
for d in "$kmm" "$nfd" "$prom"; do [ -d "$d" ] || { echo "module not found: $d" >&2; exit 1; }; done
rm -rf "$out"; mkdir -p "$out"
install -m 0644 "$kmm/config/crd/bases/kmm.sigs.x-k8s.io_modules.yaml" "$out/"
install -m 0644 "$nfd/deployment/base/nfd-crds/nfd-api-crds.yaml" "$out/nfd.k8s-sigs.io_crds.yaml"
install -m 0644 "$prom/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$out/"
install -m 0644 "$prom/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" "$out/"
cat >"$out/README.md" <<EOT
# Third-party CRDs (generated: do not edit)

Copied by \`hack/sync-external-crds.sh\` (run by \`make external-crds\` and checked
by \`make verify\`) from the pinned Go modules, so tests never depend on a
download at run time:

| file | source |
|---|---|
| kmm.sigs.x-k8s.io_modules.yaml | github.com/rh-ecosystem-edge/kernel-module-management (version in go.mod) |
| nfd.k8s-sigs.io_crds.yaml | sigs.k8s.io/node-feature-discovery $nfd_version |
| monitoring.coreos.com_*.yaml | github.com/prometheus-operator/prometheus-operator $PROMETHEUS_OPERATOR_VERSION |

The test environment installs them next to Slicer's own CRDs; production
clusters get them from NFD, KMM and the Prometheus operator.
EOT
