package plugin

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Event resources of Slicer's kinds, as the scheduler's dynamic informers name them.
const (
	sliceAllocationResource fwk.EventResource = "sliceallocations.v1alpha1.slicer.dev"
	nodeAcceleratorResource fwk.EventResource = "nodeaccelerators.v1alpha1.slicer.dev"
)

// EventsToRegister requeues pods this plugin rejected when room may have
// appeared: a SliceAllocation is gone (its slice released), a NodeAccelerator
// is added or changes (GPUs, health, slices), or a node is added. Releases of
// in-memory reservations (Unreserve) activate the rejected pods directly.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: sliceAllocationResource, ActionType: fwk.Delete}, QueueingHintFn: queueMIGPods},
		{Event: fwk.ClusterEvent{Resource: nodeAcceleratorResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: queueMIGPods},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: queueMIGPods},
	}, nil
}

// queueMIGPods requeues only pods that ask for slices (others are not
// rejected by this plugin anyway).
func queueMIGPods(_ logr.Logger, pod *corev1.Pod, _, _ any) (fwk.QueueingHint, error) {
	if hasMIGRequest(pod) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// activateRejected moves the MIG pods this plugin rejected back to the active
// queue: an in-memory reservation was released, which no API event reports.
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
	log.V(4).Info("reservation released; retrying rejected MIG pods", "pods", len(pods))
	p.handle.Activate(log, pods)
}
