#!/usr/bin/env bash
# Installs Debian's prometheus and promtool binaries into bin/prometheus/ for
# the monitoring tests (promtool check/test rules, the real-Prometheus
# scenario). Idempotent: does nothing but print the versions when both
# binaries are already there. Extracts the .deb with dpkg-deb -x: no dpkg
# install, no service started, nothing written outside bin/prometheus.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=bin/prometheus

if [ -x "$dest/prometheus" ] && [ -x "$dest/promtool" ]; then
  echo "prometheus binaries present in $dest:"
  "$dest/prometheus" --version 2>&1 | head -1
  "$dest/promtool" --version 2>&1 | head -1
  exit 0
fi

for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-prometheus: $tool not found (a Debian-based system is required)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes into the current directory and drops privileges to
# the _apt user when run as root, so the directory must be writable by it.
chmod 0777 "$tmp"
if ! (cd "$tmp" && apt-get download -qq prometheus); then
  echo "install-prometheus: apt-get download failed; running apt-get update and retrying" >&2
  apt-get update -qq
  (cd "$tmp" && apt-get download -qq prometheus)
fi
deb=$(ls "$tmp"/prometheus_*.deb)
dpkg-deb -x "$deb" "$tmp/root"
mkdir -p "$dest"
for b in prometheus promtool; do
  install -m 0755 "$tmp/root/usr/bin/$b" "$dest/$b"
done
echo "installed from $(basename "$deb") into $dest:"
"$dest/prometheus" --version 2>&1 | head -1
"$dest/promtool" --version 2>&1 | head -1
