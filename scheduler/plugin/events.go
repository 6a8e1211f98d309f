package plugin

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Event resources of Slicer's kinds, as the scheduler's dynamic informers name them.
const (
	sliceAllocationResource fwk.EventResource = "sliceallocations.v1alpha1.slicer.dev"
	nodeAcceleratorResource fwk.EventResource = "nodeaccelerators.v1alpha1.slicer.dev"
)

// EventsToRegister requeues pods this plugin rejected when room may have
// appeared: a SliceAllocation is gone (its slice released), a NodeAccelerator
// is added or changes in a way that may free room, a node is added or loses
// NVIDIA's MIG manager label.
//
// The hints decide from the event's own objects only, never from the
// snapshot: the scheduler's informers and the snapshot's are separate and
// either may run ahead. When the snapshot is the one behind, the retried pod
// can still find the old state; the snapshot's own wake-up (Cache.OnFreed,
// see reject) retries it once the snapshot has caught up. Releases of
// in-memory reservations, which no API event reports, use that wake-up too.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: sliceAllocationResource, ActionType: fwk.Delete}, QueueingHintFn: queueOnAllocationDelete},
		{Event: fwk.ClusterEvent{Resource: nodeAcceleratorResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: queueOnNodeAccelerator},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: queueOnNode},
	}, nil
}

// queueOnAllocationDelete: a deleted allocation frees its slot. Whether the
// pod fits there depends on the rest of the node, which a hint must not read
// (see EventsToRegister), so every MIG pod is retried.
func queueOnAllocationDelete(log logr.Logger, pod *corev1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	if !hasMIGRequest(pod) {
		return fwk.QueueSkip, nil
	}
	a, err := fromEventObject[slicerv1alpha1.SliceAllocation](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	log.V(5).Info("slice allocation deleted; retrying MIG pod", "allocation", a.Namespace+"/"+a.Name, "node", a.Spec.NodeName)
	return fwk.Queue, nil
}

// queueOnNodeAccelerator retries MIG pods when a NodeAccelerator appears, or
// changes in a way that may free room (snapshot.MayFreeRoom).
func queueOnNodeAccelerator(log logr.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if !hasMIGRequest(pod) {
		return fwk.QueueSkip, nil
	}
	if oldObj == nil {
		return fwk.Queue, nil // added
	}
	oldNA, err := fromEventObject[slicerv1alpha1.NodeAccelerator](oldObj)
	if err != nil {
		return fwk.Queue, err
	}
	newNA, err := fromEventObject[slicerv1alpha1.NodeAccelerator](newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if why := snapshot.MayFreeRoom(oldNA, newNA); why != "" {
		log.V(5).Info("NodeAccelerator changed; retrying MIG pod", "node", newNA.Name, "change", why)
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// queueOnNode retries MIG pods when a node is added or NVIDIA's MIG manager
// label leaves it (the only label Filter reads).
func queueOnNode(_ logr.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if !hasMIGRequest(pod) {
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

// fromEventObject returns an event's object as a T: the scheduler's dynamic
// informers deliver Slicer's kinds as unstructured objects, a delete possibly
// wrapped in a DeletedFinalStateUnknown.
func fromEventObject[T any, PT interface {
	*T
	runtime.Object
}](obj any) (PT, error) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case PT:
		return o, nil
	case *unstructured.Unstructured:
		out := PT(new(T))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("decode %s %s event object: %w", o.GetKind(), o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected event object %T (want %T)", obj, PT(nil))
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
