#!/bin/sh
# Helm post-renderer: the chart's rendered manifests on stdin, the same manifests with
# config/overlays/emulated's operator and namespace patches applied on stdout (kustomize,
# through the kubectl the local node uses). The patches put the operator on the host network
# with loopback binds and the apiserver at 127.0.0.1:16443, and its namespace at Pod Security
# privileged (hostNetwork), and the chart's pre-delete hook Job on the host network with the
# same apiserver address (hook-job.yaml, a JSON patch of every Job); the overlay's image settings in the operator patch are the same
# values the suite gives the chart. $1: the repository root.
set -eu
root=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/chart.yaml"
cp "$root/config/overlays/emulated/operator.yaml" "$root/config/overlays/emulated/namespace.yaml" "$root/test/e2e/testdata/helm-plugins/loopback/hook-job.yaml" "$dir/"
printf 'resources:\n- chart.yaml\npatches:\n- path: operator.yaml\n- path: namespace.yaml\n- path: hook-job.yaml\n  target:\n    kind: Job\n' >"$dir/kustomization.yaml"
"$root/bin/k8s/kubectl" kustomize "$dir"
