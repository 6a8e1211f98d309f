# hack/kmm/upgrade.sh: sourced by hack/kmm/run.sh once the Slicer runs in driver mode KMM
# (emulated GPUs, KMM's real manager, the no-op driver image $DRIVER_IMAGE): the rolling
# driver upgrade of docs/driver-upgrade.md, end to end on the local node (one node: the order
# across nodes is test/integration/operator/driverupgrade_test.go's).
#
#  1. A Deployment of two MIG pods under a PodDisruptionBudget (minAvailable 1) runs on slices.
#     The Slicer's driver image goes from $DRIVER_IMAGE to $DRIVER_IMAGE_V2: the operator fences
#     the node, evicts one pod (its replacement stays Pending: the node takes no MIG pod), the
#     other waits for its budget until the drain timeout ($DRAIN_S s, policy Force) deletes it; the
#     agent leaves, KMM's ordered upgrade unloads version 1 and loads version 2 (its worker
#     Pods, no-op), the agent serves again and both pods run on slices again.
#  2. With the Deployment scaled to 0, a bare MIG pod blocks the drain of the rollback to
#     $DRIVER_IMAGE (policy Wait, 10 s): the rollout stops with DriverUpgraded
#     DriverUpgradeStalled naming it, and nothing else moves (KMM's label, the agent); once the
#     pod is deleted the rollback finishes.
# The times (docs/driver-upgrade.md, "Measured") come from two watches stamped as their events
# arrive (hack/kmm/upgrade-times.py): the node's step label and the test namespace's pods.

UPG_NS=slicer-upgrade-e2e
DRAIN_S=12 # the drain timeout of the upgrade to version 2 (the CRD's minimum is 10)
MODULE_LABEL=kmm.node.kubernetes.io/version-module.$NS.$MODULE
WORKER_LABEL=beta.kmm.node.kubernetes.io/version-worker-pod.$NS.$MODULE

label_of() { kubectl get node $NODE -o jsonpath="{.metadata.labels.${1//./\\.}}"; }
upgrade_step() { label_of slicer.dev/driver-upgrade; }
condition_of() { kubectl get slicer default -o jsonpath="{.status.conditions[?(@.type==\"DriverUpgraded\")].$1}"; }
upgraded() { [ "$(condition_of status)" = True ] && [ -z "$(upgrade_step)" ]; }
stalled_on() { [ "$(condition_of reason)" = DriverUpgradeStalled ] && condition_of message | grep -q "$1"; }
step_is() { [ "$(upgrade_step)" = "$1" ]; }
# running_on_slices: the Deployment's pods that run (a MIG pod runs only once its slice is Ready)
running_on_slices() { kubectl -n $UPG_NS get pods -l app=trainer -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.deletionTimestamp}{"|"}{end}' | tr '|' '\n' | grep -c '^$' || true; }
trainers_running() { [ "$(running_on_slices)" = "$1" ]; }
pending_replacement() { kubectl -n $UPG_NS get pods -l app=trainer -o jsonpath='{range .items[?(@.status.phase=="Pending")]}{.metadata.name}{"\n"}{end}' | grep -q .; }
worker_unloaded() { grep -Eq '"kmm.node.kubernetes.io/worker-action": ?"Unload"' "$OUT/worker-pods.json"; }
worker_at() { [ "$(label_of "$WORKER_LABEL")" = "$1" ]; }
agent_uid() { agent_pods | cut -d' ' -f2; }
# stamp: each line of stdin with the time it arrived (seconds since the epoch, microseconds).
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
UPG_SECTION_T0=$(now)
# mig_pod_spec INDENT: the spec of the test's MIG pods (one slice each, gone at once on TERM).
mig_pod_spec() {
  sed "s/^/$1/" <<'EOF'
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/busybox:local
    imagePullPolicy: Never
    command: [/bin/sh, -c, "trap 'exit 0' TERM; sleep 86400 & wait"]
    resources: {limits: {nvidia.com/mig-1g.10gb: 1}}
EOF
}

step "rolling driver upgrade: version 1 to 2, the MIG pods of a Deployment drained (a PDB-protected one waits its budget)"
kubectl create namespace $UPG_NS >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: $UPG_NS}
spec:
  replicas: 2
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
$(mig_pod_spec "    ")
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: trainer, namespace: $UPG_NS}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: trainer}}
EOF
# The watches run until the namespace's end; run.sh's cleanup stops them if the run fails first.
"$ROOT/bin/k8s/kubectl" --kubeconfig "$KC" get node $NODE --watch -o jsonpath='step={.metadata.labels.slicer\.dev/driver-upgrade}{"\n"}' \
  > >(stamp >"$OUT/upgrade-steps.log") 2>/dev/null &
UPG_WATCH_PIDS="$!"
"$ROOT/bin/k8s/kubectl" --kubeconfig "$KC" -n $UPG_NS get pods --watch -o jsonpath='{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}' \
  > >(stamp >"$OUT/upgrade-pods.log") 2>/dev/null &
UPG_WATCH_PIDS="$UPG_WATCH_PIDS $!"
T0=$(now)
wait_for "2 pods of the Deployment running on slices" 120 trainers_running 2
V1=$(label_of "$MODULE_LABEL")
echo "  node at driver version $V1 (KMM worker $(label_of "$WORKER_LABEL"))"

SPEC_AT=$EPOCHREALTIME # upgrade-times.py counts the events after it
kubectl patch slicer default --type merge -p "{\"spec\":{\"driver\":{\"image\":\"$DRIVER_REPO_V2:\${KERNEL_FULL_VERSION}\",\"upgrade\":{\"drainTimeoutSeconds\":$DRAIN_S,\"drainTimeoutPolicy\":\"Force\"}}}}" >/dev/null
T0=$(now) # the times below, t+, are since this spec change
V2=""
target_changed() { V2=$(kubectl get slicer default -o jsonpath='{.status.driverUpgrade.targetVersion}'); [ -n "$V2" ] && [ "$V2" != "$V1" ]; }
wait_for "the Slicer asks for a new driver version" 60 target_changed
echo "  target version $V2"
wait_for "node fenced at step Drain (no cordon)" 60 step_is Drain
[ "$(kubectl get node $NODE -o jsonpath='{.spec.unschedulable}')" != true ] || die "the node was cordoned"
one_evicted() { [ "$(running_on_slices)" = 1 ] && pending_replacement; }
wait_for "one pod evicted, its replacement Pending: the node takes no MIG pod" 60 one_evicted
sleep 5
[ "$(running_on_slices)" = 1 ] && step_is Drain || die "the PDB-protected pod did not wait for its budget"
echo "  the other pod still runs 5s later: its budget allows no second disruption"
wait_for "the drain timeout (${DRAIN_S}s, Force) deletes it" 60 trainers_running 0
wait_for "drained: step Driver, the agent leaves the node" 60 step_is Driver
kubectl get slicer default -o jsonpath='  {.status.driverUpgrade}{"\n"}'
wait_for "KMM unloads version 1 (its worker Pod, no-op)" 60 worker_unloaded
wait_for "KMM runs version 2 (worker label $V2)" 60 worker_at "$V2"
wait_for "KMM's ready label back" 60 has_label
agent_back() { [ -n "$(agent_pods)" ]; }
wait_for "agent Pod on the node again (step Verify)" 60 agent_back
wait_for "the node released: rollout done, DriverUpgraded=True" 120 upgraded
wait_for "both pods running on slices again" 120 trainers_running 2
echo "  DriverUpgraded: $(condition_of message)"
python3 "$ROOT/hack/kmm/upgrade-times.py" --since "$SPEC_AT" --pods trainer- \
  "$OUT/upgrade-steps.log" "$OUT/upgrade-pods.log" | sed 's/^/  /'
kubectl -n $UPG_NS get pods -o wide --no-headers | sed 's/^/  /'

step "rollback to version 1 blocked by a bare MIG pod: the rollout stops, nothing else is touched"
kubectl -n $UPG_NS scale deployment trainer --replicas 0 >/dev/null
trainers_gone() { [ -z "$(kubectl -n $UPG_NS get pods -l app=trainer -o name)" ]; }
wait_for "the Deployment's pods gone" 60 trainers_gone
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: $UPG_NS}
spec:
$(mig_pod_spec "")
EOF
notebook_running() { [ "$(kubectl -n $UPG_NS get pod notebook -o jsonpath='{.status.phase}')" = Running ]; }
wait_for "the bare pod running on a slice" 60 notebook_running
AGENT_BEFORE=$(agent_uid)
kubectl patch slicer default --type merge -p "{\"spec\":{\"driver\":{\"image\":\"$DRIVER_REPO:\${KERNEL_FULL_VERSION}\",\"upgrade\":{\"drainTimeoutSeconds\":10,\"drainTimeoutPolicy\":\"Wait\"}}}}" >/dev/null
T0=$(now)
wait_for "DriverUpgraded=False DriverUpgradeStalled naming the bare pod" 60 stalled_on "$UPG_NS/notebook"
echo "  $(condition_of message)"
[ "$(label_of "$MODULE_LABEL")" = "$V2" ] || die "KMM was asked for another version while the drain was stalled"
[ "$(agent_uid)" = "$AGENT_BEFORE" ] || die "the agent left the node while the drain was stalled"
notebook_running || die "the bare pod was touched"
echo "  KMM still asked for $V2, the agent and the bare pod untouched"
STALL_S=$(since "$T0")
kubectl -n $UPG_NS delete pod notebook --wait=false >/dev/null
wait_for "the pod deleted by its user: the rollback goes on and finishes" 120 upgraded
[ "$(label_of "$MODULE_LABEL")" = "$V1" ] || die "the node is not back at version $V1"
echo "  node back at driver version $V1; the rollback stalled $STALL_S after its spec change and was done $(since "$T0") after it"
# shellcheck disable=SC2086 # a list of pids
kill $UPG_WATCH_PIDS 2>/dev/null || true
UPG_WATCH_PIDS=""
kubectl delete namespace $UPG_NS --wait=false >/dev/null
echo "  the upgrade section of this run took $(since "$UPG_SECTION_T0")"
