package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// nodeFacts reads, from the cache, what both frontends tell from the API about the node:
// whether another tool owns its MIG devices (engine.Foreign) and whether a RuntimeClass
// selects its NVIDIA runtime (engine.RuntimeBypass); and the node's labels, which GPU mode
// policies select by (nil when the node is not found).
func (r *Reconciler) nodeFacts(ctx context.Context) (migapi.Foreign, migapi.Bypass, map[string]string, error) {
	var node corev1.Node
	err := r.client.Get(ctx, types.NamespacedName{Name: r.opts.NodeName}, &node)
	// Its own plugin serves whole GPUs as nvidia.com/gpu (whole.go).
	foreign, ferr := engine.Foreign(&node, err, migapi.NVIDIAGPUResource)
	if ferr != nil {
		return foreign, migapi.Bypass{}, nil, ferr
	}
	n := &node
	if err != nil {
		n = nil // not found
	}
	var classes nodev1.RuntimeClassList
	lerr := r.client.List(ctx, &classes)
	return foreign, engine.RuntimeBypass(n, classes.Items, lerr), node.Labels, nil
}

// allocations lists the node's allocations from the cache, and the live ones that lack the
// agent's finalizer (ensureFinalizers adds it, write.go). The scheduler creates allocations
// with the finalizer, so only allocations a scheduler up to v0.1.0 created lack it (the
// upgrade path).
func (r *Reconciler) allocations(ctx context.Context, now time.Time) (map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, []*slicerv1alpha1.SliceAllocation, error) {
	var list slicerv1alpha1.SliceAllocationList
	if err := r.client.List(ctx, &list, client.MatchingLabels{slicerv1alpha1.LabelNode: r.opts.NodeName}); err != nil {
		return nil, nil, fmt.Errorf("list allocations: %w", err)
	}
	allocs := map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{}
	var needFinalizer []*slicerv1alpha1.SliceAllocation
	for i := range list.Items {
		a := &list.Items[i]
		if a.Spec.NodeName != r.opts.NodeName {
			continue
		}
		k := client.ObjectKeyFromObject(a)
		allocs[k] = a
		if a.DeletionTimestamp != nil {
			continue
		}
		if _, ok := r.firstSeen[k]; !ok {
			r.firstSeen[k] = now
		}
		// A cached copy from before the agent's own finalizer patch (ownWrites) has it.
		if !controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) && !r.own.stale(a) {
			needFinalizer = append(needFinalizer, a)
		}
	}
	r.own.prune(allocs)
	return allocs, needFinalizer, nil
}

// usage asks the kubelet which device each pod got; nil when it cannot say (NVML's
// in-use check remains).
func (r *Reconciler) usage(ctx context.Context) map[string]string {
	if r.opts.Usage == nil {
		return nil
	}
	u, err := r.opts.Usage.DeviceUsage(ctx)
	if err != nil {
		r.log(ctx).Error(err, "kubelet pod resources unavailable; relying on NVML's in-use check")
		return nil
	}
	return u
}

// usageByMIGUUID turns the kubelet's usage (device ID → pod) into the plan's (MIG UUID →
// pod) for the slices that exist. A device ID is a slot's (mig.Slot.DeviceID), or, for a pod
// the kubelet admitted when the agent named devices by MIG UUID (before v0.3), the MIG UUID
// itself. A device ID whose slot has no instance (after a reboot, before the agent recreates
// it) names no MIG device and is left out. Nil stays nil (the kubelet could not say).
func usageByMIGUUID(slices []engine.Slice, byID map[string]string) map[string]string {
	if byID == nil {
		return nil
	}
	out := map[string]string{}
	for _, s := range slices {
		if s.MIGUUID == "" {
			continue
		}
		if pod, ok := byID[s.DeviceID()]; ok {
			out[s.MIGUUID] = pod
		} else if pod, ok := byID[s.MIGUUID]; ok {
			out[s.MIGUUID] = pod
		}
	}
	return out
}

// trackOrphans starts the orphan clock of each orphan first seen now and forgets those that
// are not orphans any more.
func (r *Reconciler) trackOrphans(p Plan, now time.Time) {
	keys := make([]string, 0, len(p.Orphans))
	for _, o := range p.Orphans {
		keys = append(keys, o.Key())
	}
	r.orphanSince.Track(keys, now)
}

// podEnd is why an allocation's pod no longer holds its slices (podsGone).
type podEnd struct {
	// Finished: the pod exists, with the allocation's UID, in phase Succeeded or Failed.
	// Otherwise it does not exist (no pod of that name, or one with another UID).
	Finished bool
	Why      string
}

// Reason is the Event reason of the release.
func (e podEnd) Reason() string {
	if e.Finished {
		return "PodFinished"
	}
	return "PodGone"
}

// finished reports whether the pod is in a terminal phase: its containers have stopped
// and will not start again, so it uses no device. A pod whose containers restart
// (restartPolicy OnFailure or Always) stays Running or Pending meanwhile.
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// holds reports whether pod is the allocation's pod (UID uid) and may still use its slices.
func holds(pod *corev1.Pod, uid string) bool {
	return string(pod.UID) == uid && !finished(pod)
}

// podEndOf says, from the API server's copy of the pod named key (nil: none), whether the
// allocation of pod UID uid is to be released, and why.
func podEndOf(key types.NamespacedName, uid string, pod *corev1.Pod) (podEnd, bool) {
	switch {
	case pod == nil:
		return podEnd{Why: fmt.Sprintf("pod %s (UID %s) does not exist", key, uid)}, true
	case string(pod.UID) != uid:
		return podEnd{Why: fmt.Sprintf("pod %s is another pod (UID %s) than the allocation's (UID %s)", key, pod.UID, uid)}, true
	case finished(pod):
		return podEnd{Finished: true, Why: fmt.Sprintf("pod %s (UID %s) finished (phase %s)", key, uid, pod.Status.Phase)}, true
	}
	return podEnd{}, false
}

// podsGone returns the live allocations whose pod no longer holds its slices, with why: no
// pod of the allocation's pod name, one with another UID (the pod was deleted and another
// created with its name), or the allocation's pod in phase Succeeded or Failed. The cache
// (the pods bound to the node) clears the allocations whose pod it has, with that UID, not
// finished; for the rest the evidence is a GET from the API server, never the cache alone:
// the scheduler commits an allocation just before it binds the pod, so the cache may not
// have that pod yet, and a cache that shows the pod finished is confirmed the same way.
func (r *Reconciler) podsGone(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation) (map[types.NamespacedName]podEnd, error) {
	if r.opts.Live == nil {
		return nil, nil
	}
	gone := map[types.NamespacedName]podEnd{}
	for _, k := range sortedKeys(allocs) {
		a := allocs[k]
		if a.DeletionTimestamp != nil {
			continue
		}
		key := types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}
		var pod corev1.Pod
		err := r.client.Get(ctx, key, &pod)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get cached pod %s: %w", key, err)
		}
		if err == nil && holds(&pod, a.Spec.PodUID) {
			continue
		}
		pod = corev1.Pod{}
		live := &pod
		err = r.opts.Live.Get(ctx, key, live)
		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return nil, fmt.Errorf("get pod %s: %w", key, err)
		}
		if end, ok := podEndOf(key, a.Spec.PodUID, live); ok {
			gone[k] = end
		}
	}
	return gone, nil
}
