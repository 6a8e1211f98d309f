#!/usr/bin/env bash
# hack/kmm/run.sh: KMM's own manager (the version Slicer's go.mod pins) against
# the local node, with no-op worker and driver images, so that KMM's ready
# label, not a hand-set one, lets Slicer's agent onto the node.
#
#   flock /work/.local-node.lock hack/kmm/run.sh    (root; the node is one per machine)
#
# Nothing touches the host kernel: the worker Pod's two programs (the worker
# image's entrypoint, `/bin/sh -c` in the driver image) are both hack/kmm/noop,
# and an admission policy (noop-only-policy.yaml) refuses any KMM worker Pod
# that runs another image. docs/design/kmm.md has the reading of KMM's source
# this relies on, what the script stands in for, and a recorded run.
#
# Steps: build (bin/kmm, the node, Slicer), node up, KMM's CRDs and the two
# OpenShift stand-ins, the guard policy, Slicer installed as `make demo` does
# (Emulated), KMM's manager started on the host (loopback-only listeners),
# then the Slicer switched to driver mode KMM with the no-op driver image (the
# agent keeps emulating its GPUs), then the rolling driver upgrade to a second
# no-op driver image and back (hack/kmm/upgrade.sh).
# It waits for: the worker Pod Succeeded, the node's
# kmm.node.kubernetes.io/<ns>.slicer-nvidia.ready label, the agent Pod back on
# the node, DriverReady=True; then deletes the Slicer and waits for KMM's
# unload Pod (no-op too) and the label's removal. The node is always brought
# down at the end, and every host path the script created is removed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LC=$ROOT/hack/local-cluster
KC=$ROOT/.local/kubeconfig
OUT=$ROOT/.local/kmm
NODE=127.0.0.1
NS=slicer-system-agent # the Module's namespace: the agent's (operator/render/kmm.go)
MODULE=slicer-nvidia
KMM_NS=kmm-system
WORKER_IMAGE=localhost/slicer-kmm-noop-worker:v1
DRIVER_REPO=localhost/slicer-kmm-noop-driver
DRIVER_REPO_V2=localhost/slicer-kmm-noop-driver-v2 # the rolling upgrade's second version (upgrade.sh)
READY_LABEL=kmm.node.kubernetes.io/$NS.$MODULE.ready
WAIT_S=${KMM_WAIT_S:-180}
FIRMWARE=/var/lib/slicer-kmm-run/firmware # KMM's firmwareHostPath (see below; removed after)

die() { echo "kmm: $*" >&2; exit 1; }
kubectl() { "$ROOT/bin/k8s/kubectl" --kubeconfig "$KC" "$@"; }
now() { date +%s%N; }
since() { local d=$(( ($(now) - $1) / 10000000 )); printf '%d.%02ds' $((d / 100)) $((d % 100)); }
step() { printf '\n[kmm] %s\n' "$*"; }
wait_for() {
  local what=$1 secs=$2 t; shift 2
  t=$(now)
  # by the clock, not a count of tries: on a busy machine one try can take a second
  while [ $(( $(now) - t )) -lt $((secs * 1000000000)) ]; do
    if "$@" >/dev/null 2>&1; then echo "  $what: $(since "$t") (t+$(since "$T0"))"; return 0; fi
    sleep 0.2
  done
  die "timed out after ${secs}s waiting for: $what"
}

[ "$(id -u)" = 0 ] || die "must run as root (the local node)"
"$LC" status >/dev/null 2>&1 && die "a local node is already running; this script brings up its own"
mkdir -p "$OUT"
T0=$(now)

step "build: bin/kmm (KMM manager, no-op), the node's binaries, Slicer's binaries"
"$ROOT/hack/kmm/build.sh"
"$LC" build
nice -n 19 make -C "$ROOT" --no-print-directory build >/dev/null

KVER=$(uname -r)
DRIVER_IMAGE=$DRIVER_REPO:$KVER
DRIVER_IMAGE_V2=$DRIVER_REPO_V2:$KVER
step "no-op images: $WORKER_IMAGE, $DRIVER_IMAGE, $DRIVER_IMAGE_V2"
# KMM's worker image: entrypoint /usr/local/bin/worker (KMM's Dockerfile.worker);
# the Pod passes `kmod load|unload /etc/kmm-worker/config.yaml ...` as args.
"$ROOT/bin/tools/mkimage" -o "$OUT/noop-worker.tar" -name "$WORKER_IMAGE" \
  -entrypoint /usr/local/bin/worker -file /usr/local/bin/worker="$ROOT/bin/kmm/noop"
# The driver image as KMM expects it (modules under <dirName>/lib/modules/<kernel>,
# firmware under the Module's firmwarePath), empty; its /bin/sh is the no-op.
# Two versions of it, for the rolling upgrade: the same no-op, told apart by their
# config (an environment variable), so they are two images to the runtime too.
"$ROOT/bin/tools/mkimage" -o "$OUT/noop-driver.tar" -name "$DRIVER_IMAGE" -env SLICER_NOOP_DRIVER_VERSION=1 \
  -file /bin/sh="$ROOT/bin/kmm/noop" -dir "/opt/lib/modules/$KVER" -dir /firmware
"$ROOT/bin/tools/mkimage" -o "$OUT/noop-driver-v2.tar" -name "$DRIVER_IMAGE_V2" -env SLICER_NOOP_DRIVER_VERSION=2 \
  -file /bin/sh="$ROOT/bin/kmm/noop" -dir "/opt/lib/modules/$KVER" -dir /firmware

created=()
cleanup() {
  local rc=$?
  set +e
  if [ -n "${KMM_PID:-}" ]; then kill "$KMM_PID" 2>/dev/null; wait "$KMM_PID" 2>/dev/null; fi
  [ -n "${WATCH_PID:-}" ] && kill "$WATCH_PID" 2>/dev/null
  # shellcheck disable=SC2086 # upgrade.sh's watches: a list of pids
  [ -n "${UPG_WATCH_PIDS:-}" ] && kill $UPG_WATCH_PIDS 2>/dev/null
  "$LC" down >/dev/null 2>&1
  for p in "${created[@]}"; do rm -rf "$p"; done
  echo "[kmm] node down; host paths removed: ${created[*]:-none}; exit $rc"
}
trap cleanup EXIT

step "node up"
"$LC" up --default-scheduler | tail -n 2
"$LC" load "$OUT/noop-worker.tar" "$OUT/noop-driver.tar" "$OUT/noop-driver-v2.tar" >/dev/null

# The worker Pod mounts these host paths with type Directory/File (KMM's
# baseWorkerPod); this host has none of them (its kernel has no module
# support at all). Empty ones are created for the run and removed after.
step "host paths KMM's worker Pod mounts"
for d in /usr/lib/modules /etc/containers; do
  [ -e "$d" ] || { mkdir "$d"; created+=("$d"); echo "  created $d (empty)"; }
done
# KMM's worker mounts firmwareHostPath at the same path, and its /tmp is a
# read-only volume, so the path must not be under /tmp (a checkout in /tmp
# would fail the worker's start: "mkdir .../rootfs/tmp/...: read-only file system").
[ -e "$FIRMWARE" ] || { mkdir -p "$FIRMWARE"; created+=("$(dirname "$FIRMWARE")"); echo "  created $FIRMWARE (empty)"; }
if [ ! -e /var/lib/kubelet/config.json ]; then
  echo '{"auths":{}}' >/var/lib/kubelet/config.json; created+=(/var/lib/kubelet/config.json)
  echo "  created /var/lib/kubelet/config.json (no credentials)"
fi

step "KMM's CRDs, the OpenShift stand-ins, the no-op-only admission policy"
kmmdir=$(cd "$ROOT/hack/kmm" && go list -m -f '{{.Dir}}' github.com/rh-ecosystem-edge/kernel-module-management)
kubectl apply --server-side -f "$kmmdir/config/crd/bases/" -f "$ROOT/hack/kmm/openshift-crds.yaml" >/dev/null
sed -e "s|WORKER_IMAGE|$WORKER_IMAGE|" -e "s|DRIVER_IMAGES|'$DRIVER_IMAGE', '$DRIVER_IMAGE_V2'|" "$ROOT/hack/kmm/noop-only-policy.yaml" |
  kubectl apply --server-side -f - >/dev/null
kubectl wait --for condition=established --timeout=60s crd --all >/dev/null
# The guard must refuse a worker Pod with any other image before KMM runs.
guard_refuses() {
  ! kubectl -n default create --dry-run=server -f - >"$OUT/guard.txt" 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata: {name: kmm-worker-guard-check, labels: {kmm.node.kubernetes.io/worker-action: Load}}
spec: {containers: [{name: worker, image: localhost/busybox:local}]}
EOF
  grep -q "no-op worker and driver images" "$OUT/guard.txt"
}
T0=$(now)
wait_for "the policy refuses a KMM worker Pod with another image" 30 guard_refuses
sed 's/^/  /' "$OUT/guard.txt"
kubectl create namespace $KMM_NS >/dev/null

step "Slicer installed as make demo does (driver mode Emulated)"
"$ROOT/hack/demo" install | sed 's/^/  /'

step "KMM manager on the host (loopback listeners only; no webhook server)"
cat >"$OUT/kmm-config.yaml" <<EOF
healthProbeBindAddress: 127.0.0.1:18091
leaderElection:
  enabled: false
metrics:
  bindAddress: "0"
webhook:
  port: 19443
worker:
  runAsUser: 0
  seLinuxType: spc_t
  firmwareHostPath: $FIRMWARE
EOF
KUBECONFIG=$KC OPERATOR_NAMESPACE=$KMM_NS RELATED_IMAGE_WORKER=$WORKER_IMAGE \
  RELATED_IMAGE_SIGN=localhost/unused-kmm-sign:v1 \
  "$ROOT/bin/kmm/manager" --config "$OUT/kmm-config.yaml" >"$OUT/kmm-manager.log" 2>&1 &
KMM_PID=$!
wait_for "KMM manager healthy" 60 curl -fsS http://127.0.0.1:18091/healthz
echo "  KMM listeners: $(ss -Hltnp | grep "pid=$KMM_PID," | awk '{print $4}' | tr '\n' ' ')"

# Every worker Pod, as the API server saw it (KMM deletes them once read).
kubectl -n $NS get pods -l kmm.node.kubernetes.io/worker-action --watch --output-watch-events -o json \
  >"$OUT/worker-pods.json" 2>/dev/null &
WATCH_PID=$!

# On OpenShift the CA injectors fill the two ConfigMaps KMM creates next to
# the Module and projects into the worker Pod; here nobody does, and the
# kubelet cannot mount a missing key. Stand in for them with this cluster's CA.
fill_ca() {
  local cm key type
  for type in cluster service; do
    key=ca-bundle.crt; [ $type = service ] && key=service-ca.crt
    for cm in $(kubectl -n $NS get cm -l kmm.openshift.io/ca.type=$type -o name); do
      kubectl -n $NS get "$cm" -o jsonpath='{.data}' | grep -q "$key" && continue
      python3 -c 'import json, sys; print(json.dumps({"data": {sys.argv[1]: open(sys.argv[2]).read()}}))' \
        "$key" "$ROOT/.local/cluster/pki/ca.crt" | kubectl -n $NS patch "$cm" --type merge --patch-file /dev/stdin >/dev/null
    done
  done
  [ "$(kubectl -n $NS get cm -l kmm.openshift.io/ca.type -o jsonpath='{range .items[*]}{.data}{"\n"}{end}' | grep -c '\.crt')" = 2 ]
}
agent_pods() { kubectl get pods -A -l app.kubernetes.io/name=slicer-agent -o jsonpath='{range .items[*]}{.spec.nodeName} {.metadata.uid}{"\n"}{end}'; }
agent_on_node() { local p; p=$(agent_pods); [ "${p% *}" = "$NODE" ] && [ "${p#* }" != "$OLD_AGENT_UID" ]; }
agent_gone() { [ -z "$(agent_pods)" ]; }
node_labels() { kubectl get node $NODE -o go-template='{{range $k, $v := .metadata.labels}}{{$k}}{{"\n"}}{{end}}'; }
has_label() { node_labels | grep -qxF "$READY_LABEL"; }
no_label() { ! node_labels | grep -qxF "$READY_LABEL"; }
worker_succeeded() { grep -Eq '"phase": ?"Succeeded"' "$OUT/worker-pods.json"; }
nmc_loaded() { [ -n "$(kubectl get nodemodulesconfig $NODE -o jsonpath="{.status.modules[?(@.name==\"$MODULE\")].config.containerImage}")" ]; }
driver_ready() { [ "$(kubectl get slicer default -o jsonpath='{.status.conditions[?(@.type=="DriverReady")].status}')" = True ]; }
# unloads: the Unload worker Pods seen (watch events: several per Pod); the rolling upgrade
# runs some before the uninstall's.
unloads() { grep -Ec '"kmm.node.kubernetes.io/worker-action": ?"Unload"' "$OUT/worker-pods.json" || true; }
unload_done() { [ "$(unloads)" -gt "$UNLOADS_BEFORE" ] && no_label; }

step "Slicer switched to driver mode KMM (driver image $DRIVER_REPO:\${KERNEL_FULL_VERSION}; the agent keeps emulating its GPUs)"
OLD_AGENT_UID=$(agent_pods | cut -d' ' -f2)
echo "  agent Pod before: $(agent_pods)"
T0=$(now)
kubectl patch slicer default --type merge -p "{\"spec\":{\"driver\":{\"mode\":\"KMM\",\"image\":\"$DRIVER_REPO:\${KERNEL_FULL_VERSION}\",\"inTreeModulesToRemove\":[\"nouveau\"]}}}" >/dev/null
wait_for "Module $NS/$MODULE rendered by the operator" 60 kubectl -n $NS get module $MODULE
wait_for "agent Pod off the node (its affinity now needs $READY_LABEL)" 60 agent_gone
wait_for "KMM's CA ConfigMaps filled (OpenShift's injectors' job)" 60 fill_ca
wait_for "KMM worker Pod (no-op) Succeeded" "$WAIT_S" worker_succeeded
wait_for "NodeModulesConfig $NODE status lists $MODULE" 60 nmc_loaded
wait_for "node label $READY_LABEL set by KMM" 60 has_label
wait_for "agent Pod on the node again" 120 agent_on_node
wait_for "Slicer DriverReady=True" 60 driver_ready
kubectl get slicer default -o jsonpath='{range .status.conditions[?(@.type=="DriverReady")]}  DriverReady={.status} {.reason}: {.message}{"\n"}{end}'
kubectl -n $NS get module $MODULE -o jsonpath='  Module status: {.status.moduleLoader}{"\n"}'
kubectl get pods -A -l app.kubernetes.io/name=slicer-agent -o wide --no-headers | sed 's/^/  agent: /'

# The rolling driver upgrade, on the same node and KMM manager (docs/driver-upgrade.md).
# shellcheck source=hack/kmm/upgrade.sh
. "$ROOT/hack/kmm/upgrade.sh"

step "the worker Pod KMM created, as admitted"
python3 "$ROOT/hack/kmm/worker-pods.py" "$OUT/worker-pods.json"

step "the same Pod in a namespace that enforces Pod Security 'restricted' (config/manager/manager.yaml's slicer-system)"
kubectl create namespace kmm-psa-check >/dev/null
kubectl label namespace kmm-psa-check pod-security.kubernetes.io/enforce=restricted >/dev/null
python3 - "$OUT/worker-pods.json" >"$OUT/psa-pod.json" <<'EOF'
import json, sys
ev, _ = json.JSONDecoder().raw_decode(open(sys.argv[1]).read().lstrip())
p = ev["object"]
meta = p["metadata"]
print(json.dumps({"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": meta["name"], "namespace": "kmm-psa-check", "labels": meta["labels"]},
  "spec": {k: v for k, v in p["spec"].items() if k not in ("nodeName", "serviceAccountName", "serviceAccount")}}))
EOF
kubectl create --dry-run=server -f "$OUT/psa-pod.json" 2>&1 | sed 's/^/  /' | cut -c1-1200 || true

step "Slicer deleted: KMM unloads (no-op) and removes its label"
T0=$(now)
UNLOADS_BEFORE=$(unloads)
kubectl delete slicer default --wait=false >/dev/null
wait_for "unload worker Pod ran and $READY_LABEL removed" 120 unload_done
wait_for "agent Pod gone" 60 agent_gone
# The last Unload worker Pod (the uninstall's) and what followed it.
python3 "$ROOT/hack/kmm/worker-pods.py" "$OUT/worker-pods.json" | awk '/action=Unload/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }'
echo
echo "[kmm] OK; KMM manager log: $OUT/kmm-manager.log, worker Pods: $OUT/worker-pods.json"
