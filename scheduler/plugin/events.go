package plugin

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// EventsToRegister requeues pods this plugin rejected when a node is added or
// loses NVIDIA's MIG manager label. Room freed by Slicer's own kinds (a
// SliceAllocation deleted, a NodeAccelerator change that may free room,
// snapshot.MayFreeRoom) and by in-memory reservations released wakes the
// rejected pods through the snapshot (Cache.OnFreed, see reject), once the
// snapshot shows it. Slicer's kinds are deliberately not registered here:
// kube-scheduler would run a dynamic informer per registered custom resource,
// keeping a second, unstructured copy of every NodeAccelerator and
// SliceAllocation (measured at 5,000 nodes × 8 GPUs: 76 of the plugin's
// 100 MiB, docs/benchmarks.md) to wake the same pods the snapshot already
// wakes.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: queueOnNode},
	}, nil
}

// queueOnNode retries MIG and whole-GPU pods when a node is added or NVIDIA's MIG manager
// label leaves it (the only label Filter reads).
func queueOnNode(_ logr.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if !asksForGPUs(pod) {
		return fwk.QueueSkip, nil
	}
	if oldObj == nil {
		return fwk.Queue, nil // added
	}
	oldNode, okOld := oldObj.(*corev1.Node)
	newNode, okNew := newObj.(*corev1.Node)
	if !okOld || !okNew {
		return fwk.Queue, fmt.Errorf("node event with objects %T, %T", oldObj, newObj)
	}
	_, had := oldNode.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	_, has := newNode.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	if had && !has {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// reject records a MIG pod this plugin turned away, to retry it when the
// snapshot reports room freed (Cache.OnFreed). gen is the cache's
// FreedGeneration taken before the cycle read the snapshot. If it moved
// since, room was freed while the pod was being judged, maybe on the older
// state, and the wake-up for that change may have run before the pod was
// recorded: the pod is retried at once (Activate on a pod still in its
// cycle requeues it when the cycle ends). The generation is read after the
// pod is recorded, and the cache bumps it before the wake-up drains the
// record, so no wake-up is lost between the two.
func (p *Plugin) reject(log logr.Logger, pod *corev1.Pod, gen uint64) {
	p.mu.Lock()
	p.rejected[pod.UID] = pod
	p.mu.Unlock()
	if p.hooks.Rejected != nil {
		p.hooks.Rejected(pod)
	}
	if p.cache.FreedGeneration() == gen {
		return
	}
	p.mu.Lock()
	delete(p.rejected, pod.UID)
	p.mu.Unlock()
	log.V(4).Info("room freed while the pod was judged; retrying it", "pod", klog.KObj(pod))
	p.handle.Activate(log, map[string]*corev1.Pod{pod.Namespace + "/" + pod.Name: pod})
}

// activateRejected moves the MIG pods this plugin rejected back to the active
// queue: the snapshot reports room freed (Cache.OnFreed).
func (p *Plugin) activateRejected(log logr.Logger) {
	p.mu.Lock()
	if len(p.rejected) == 0 {
		p.mu.Unlock()
		return
	}
	pods := make(map[string]*corev1.Pod, len(p.rejected))
	for uid, pod := range p.rejected {
		pods[pod.Namespace+"/"+pod.Name] = pod
		delete(p.rejected, uid)
	}
	p.mu.Unlock()
	log.V(4).Info("room freed in the snapshot; retrying rejected MIG pods", "pods", len(pods))
	p.handle.Activate(log, pods)
}

// forgetDeletedPod drops what the plugin keeps in memory about a pod that is gone (a handler on
// the scheduler's pod informer): its nomination, its dry run, its place among the rejected pods,
// its PreBind failure, and its plan's wait and refusal. The rooms its plan holds for the moved
// pods' replacements stay: they are the replacements', not the deleted pod's.
func (p *Plugin) forgetDeletedPod(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.held.forget(pod.UID, "")
	if p.preemptor != nil {
		p.preemptor.forget(pod.UID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.rejected, pod.UID)
	delete(p.prebindFailed, pod.UID)
	if p.defrag != nil {
		p.defrag.forget(pod.UID)
	}
}
