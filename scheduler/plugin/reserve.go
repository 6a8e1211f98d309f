package plugin

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Reserve chooses the GPU and placement of each slice on the chosen node (on
// the current snapshot) and holds them in memory.
func (p *Plugin) Reserve(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return nil // no slice asked for: PreFilter skipped the pod
	}
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	r := &snapshot.Reservation{PodUID: pod.UID, Namespace: pod.Namespace, PodName: pod.Name, NodeName: nodeName,
		Slots: append([]snapshot.Slot(nil), s.adopted...)}
	if s.whole > 0 {
		slots, err := p.placeWhole(pod, nodeName, s)
		if err != nil {
			p.reject(klog.FromContext(ctx), pod, s.freedGen)
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node %s: %v", nodeName, err))
		}
		r.Slots = append(r.Slots, slots...)
	}
	if s.req != nil {
		n := p.cache.Node(nodeName)
		if n == nil {
			return fwk.NewStatus(fwk.Unschedulable, reasonNoAccelerator)
		}
		as, err := p.place(pod, n, s)
		if err != nil {
			p.reject(klog.FromContext(ctx), pod, s.freedGen)
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node %s: %v", nodeName, err))
		}
		for _, a := range as {
			r.Slots = append(r.Slots, snapshot.Slot{Slot: mig.Slot{GPU: n.GPUs[a.GPU].UUID, Profile: a.Profile.Name,
				Placement: a.Placement}, Index: s.missing[a.Slice]})
		}
	}
	if err := p.cache.Reserve(r); err != nil {
		p.reject(klog.FromContext(ctx), pod, s.freedGen)
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	klog.FromContext(ctx).V(4).Info("slices reserved", "pod", klog.KObj(pod), "node", nodeName, "slots", r.Slots)
	if p.hooks.AfterReserve != nil {
		if err := p.hooks.AfterReserve(ctx, pod); err != nil {
			return fwk.AsStatus(err)
		}
	}
	return nil
}

// place chooses the pod's slots on the node: the placement preemption cleared for it when it
// is still free, else the policy's; either way off the placements cleared for other nominated
// pods of equal or higher priority (the framework filtered the node with them added, and
// Filter with the ones it held itself: heldOverlay).
func (p *Plugin) place(pod *corev1.Pod, n *snapshot.Node, s *podState) ([]mig.Assignment, error) {
	view := p.reserveView(pod, n)
	if as := nominatedAssignments(n, view, s, p.held.slots(pod.UID, n.Name)); as != nil {
		return as, nil
	}
	return mig.Place(view, s.req)
}

// reserveView is node n as Reserve places the pod on it: off the room cleared for other
// nominated pods of equal or higher priority (slices or whole GPUs) and the room held for
// others.
func (p *Plugin) reserveView(pod *corev1.Pod, n *snapshot.Node) mig.Node {
	ov := &nodeOverlay{removed: map[types.UID]bool{}, added: map[types.UID]addedPod{}}
	if p.handle != nil {
		prio := corev1helpers.PodPriority(pod)
		for _, pi := range p.handle.NominatedPodsForNode(n.Name) {
			q := pi.GetPod()
			if q.UID != pod.UID && corev1helpers.PodPriority(q) >= prio && asksForGPUs(q) {
				p.addPod(ov, n.Name, q)
			}
		}
	}
	if held := p.heldOverlay(ov, n.Name, pod); held != nil {
		ov = held
	}
	return p.applyOverlay(n, ov)
}

// nominatedAssignments turns the cleared slots into assignments of s.req when every one of
// them can still be taken on view; nil otherwise.
func nominatedAssignments(n *snapshot.Node, view mig.Node, s *podState, slots []snapshot.Slot) []mig.Assignment {
	if len(slots) == 0 || len(slots) != s.req.Len() {
		return nil
	}
	gpu := map[string]int{}
	for i, g := range n.GPUs {
		gpu[g.UUID] = i
	}
	slice := map[int32]int{}
	for k, idx := range s.missing {
		slice[idx] = k
	}
	var as []mig.Assignment
	for _, sl := range slots {
		g, ok1 := gpu[sl.GPU]
		k, ok2 := slice[sl.Index]
		if !ok1 || !ok2 {
			return nil
		}
		prof, err := n.GPUs[g].Model.Profile(sl.Profile)
		if err != nil {
			return nil
		}
		as = append(as, mig.Assignment{Slice: k, GPU: g, Profile: prof, Placement: sl.Placement})
	}
	try := mig.Node{GPUs: slices.Clone(view.GPUs)}
	for _, g := range try.GPUs {
		if !g.Usable {
			return nil
		}
	}
	if err := mig.Apply(try, as); err != nil {
		return nil
	}
	return as
}

// Unreserve drops the pod's reservation (idempotent). When PreBind had
// already committed allocations and the pod is not bound, they are deleted:
// a failed bind is evidence that the pod does not hold them (docs/design/invariants.md,
// rule R3). The agent's finalizer, set at creation, keeps each one, and its
// placement taken in the snapshot, until the node's agent has destroyed the
// slice or found none; the scheduler never removes it (docs/design/handoff.md:
// an empty status does not prove that no GPU instance exists).
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	log := klog.FromContext(ctx)
	p.mu.Lock()
	failedPreBind := p.prebindFailed[pod.UID]
	delete(p.prebindFailed, pod.UID)
	p.mu.Unlock()
	// Dropping the reservation wakes the rejected pods (the cache's OnFreed).
	r := p.cache.Unreserve(pod.UID)
	if r == nil {
		return
	}
	reason := UnreserveOther
	switch {
	case failedPreBind:
		reason = UnreservePreBind
	case r.Committed:
		reason = UnreserveBind
	}
	if !r.Committed {
		if p.podGone(pod) {
			reason = UnreserveDeleted
		}
		p.metrics.Unreserve.WithLabelValues(reason).Inc()
		return
	}
	var current corev1.Pod
	err := p.client.Get(ctx, client.ObjectKeyFromObject(pod), &current)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && current.UID != pod.UID):
		reason = UnreserveDeleted
	case err != nil:
		log.Error(err, "cannot tell whether the pod is bound; keeping its allocations", "pod", klog.KObj(pod))
		p.metrics.Unreserve.WithLabelValues(reason).Inc()
		return
	case current.Spec.NodeName != "":
		log.Info("pod is bound although binding reported a failure; keeping its allocations", "pod", klog.KObj(pod), "node", current.Spec.NodeName)
		p.metrics.Unreserve.WithLabelValues(reason).Inc()
		return
	}
	p.metrics.Unreserve.WithLabelValues(reason).Inc()
	for _, s := range r.Slots {
		a := &slicerv1alpha1.SliceAllocation{}
		a.Namespace, a.Name = pod.Namespace, slicerv1alpha1.AllocationName(pod.Name, string(pod.UID), s.Index)
		if err := p.client.Delete(ctx, a); err != nil && !apierrors.IsNotFound(err) {
			log.Error(err, "cannot delete the allocation of an unbound pod", "allocation", klog.KObj(a))
			continue
		}
		log.Info("allocation of an unbound pod deleted", "allocation", klog.KObj(a), "reason", reason)
	}
}

// podGone reports whether the pod (this UID) is gone, by the informer.
func (p *Plugin) podGone(pod *corev1.Pod) bool {
	cur, err := p.pods.Pods(pod.Namespace).Get(pod.Name)
	return apierrors.IsNotFound(err) || (err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil))
}
