package plugin

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// nomination is the placement preemption (or a defragmentation plan) cleared for a pod on a
// node: AddPod gives it to the nominated pod while its victims terminate, Reserve prefers it
// for the pod itself, and Filter and Reserve keep pods of lower priority off preemption's
// (heldOverlay).
// Memory only, but for a defragmentation plan's pod, whose nomination its plan's record restores
// (defrag_record.go): after a restart a nominated pod is placed where the policy would place it
// (placeAdded).
type nomination struct {
	node      string
	slots     []snapshot.Slot
	namespace string
	name      string
	priority  int32
	// byPreemption: preemption made it (PostFilter forgets it once nothing is awaited).
	byPreemption bool
}

// nominatedSlots returns the placement cleared for the pod on the node, or nil.
func (p *Plugin) nominatedSlots(uid types.UID, node string) []snapshot.Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.nominations[uid]
	if !ok || n.node != node {
		return nil
	}
	return slices.Clone(n.slots)
}

// setNomination records the placement cleared for the pod (nil slots forget it).
func (p *Plugin) setNomination(pod *corev1.Pod, node string, slots []snapshot.Slot, byPreemption bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slots == nil {
		p.forgetNominationLocked(pod.UID, "")
		return
	}
	if p.nominations == nil {
		p.nominations = map[types.UID]nomination{}
	}
	p.nominations[pod.UID] = nomination{node: node, slots: slots, namespace: pod.Namespace, name: pod.Name,
		priority: corev1helpers.PodPriority(pod), byPreemption: byPreemption}
	p.indexNominationsLocked()
}

// forgetNominationLocked drops the pod's nomination (only the one on node, unless node is
// empty); p.mu held.
func (p *Plugin) forgetNominationLocked(uid types.UID, node string) {
	if n, ok := p.nominations[uid]; ok && (node == "" || n.node == node) {
		delete(p.nominations, uid)
		p.indexNominationsLocked()
	}
}

// indexNominationsLocked publishes the nodes that have nominations, which Filter reads on every
// node without taking p.mu; p.mu held.
func (p *Plugin) indexNominationsLocked() {
	nodes := make(map[string]bool, len(p.nominations))
	for _, n := range p.nominations {
		nodes[n.node] = true
	}
	p.nominatedNodes.Store(&nodes)
}

// hasNominations reports whether any pod has a recorded nomination on the node.
func (p *Plugin) hasNominations(node string) bool {
	nodes := p.nominatedNodes.Load()
	return nodes != nil && (*nodes)[node]
}

// heldOverlay returns ov with the placements preemption cleared, or a defragmentation plan's
// moves are opening, for other pods nominated to the node added, for the pods of equal or higher
// priority than pod that the framework did not add itself; nil when it adds none (ov itself is
// never changed: the framework filters nodes in parallel on one cycle state). A plan holds its
// moved pods' destinations otherwise (pledges, defrag_evict.go). The framework's own nomination
// of a plan's pod may also be missing after a scheduler restart (the plan's record restores the
// plugin's, defrag_record.go) or before its nominatedNodeName update is written.
//
// The framework adds the nominated pods its queue lists (AddPod), and the queue can lose one
// for a while as kube-scheduler 1.37 works (k8s.io/kubernetes/pkg/scheduler/schedule_one.go,
// handleSchedulingFailure): when the nominated pod's cycle fails again while it waits for its
// victims, the queue re-reads the pod from the informer and keeps the nomination the copy there
// shows, none when the scheduler's own nominatedNodeName update has not reached it yet; and a
// pod being scheduled, in no queue, is listed without its spec, so hasMIGRequest is false for
// it. Pods of lower priority would take the room being cleared in that window and be preempted
// again. The plugin's own record holds the room until the pod is bound (PostBind), is deleted,
// is nominated elsewhere, or, for preemption's rooms, waits for nothing any more (PostFilter);
// for a plan's, until the plan's moves time out (sweepDefrag).
func (p *Plugin) heldOverlay(ov *nodeOverlay, node string, pod *corev1.Pod) *nodeOverlay {
	if !p.hasNominations(node) {
		return nil
	}
	prio := corev1helpers.PodPriority(pod)
	type held struct {
		uid types.UID
		n   nomination
	}
	var found []held
	p.mu.Lock()
	for uid, n := range p.nominations {
		if n.node != node || uid == pod.UID || n.priority < prio {
			continue
		}
		if _, waits := p.defragRun.plans[uid]; !n.byPreemption && !waits {
			continue // neither preemption's room nor one a plan's moves are opening (defrag_evict.go)
		}
		if ov != nil {
			if _, ok := ov.added[uid]; ok {
				continue
			}
		}
		found = append(found, held{uid, n})
	}
	p.mu.Unlock()
	var out *nodeOverlay
	for _, h := range found {
		if !p.stillNominated(h.uid, h.n) || p.cache.PodClaimsOn(h.uid, node) {
			continue
		}
		if out == nil {
			out = &nodeOverlay{removed: map[types.UID]bool{}, added: map[types.UID]addedPod{}}
			if ov != nil {
				out.removed, out.added = maps.Clone(ov.removed), maps.Clone(ov.added)
			}
		}
		out.added[h.uid] = addedPod{slots: slices.Clone(h.n.slots)}
	}
	return out
}

// stillNominated reports whether the informer still shows the nominated pod waiting for the
// node: the same pod, not bound, not being deleted, and nominated to that node or (the window
// heldOverlay covers) to none. A record that fails the test for any reason but "none yet" is
// forgotten. Without a pod lister (unit tests) the record is trusted.
func (p *Plugin) stillNominated(uid types.UID, n nomination) bool {
	if p.pods == nil {
		return true
	}
	cur, err := p.pods.Pods(n.namespace).Get(n.name)
	if err == nil && cur.UID == uid && cur.Spec.NodeName == "" && cur.DeletionTimestamp == nil &&
		(cur.Status.NominatedNodeName == "" || cur.Status.NominatedNodeName == n.node) {
		return true
	}
	p.mu.Lock()
	p.forgetNominationLocked(uid, n.node)
	p.mu.Unlock()
	return false
}

// forgetIdleNomination drops the room preemption cleared for the pod once the pod waits for
// nothing there (awaited is empty): the room is free and the pod did not take it, or another
// pod of higher priority holds it; either way holding it would only keep pods off free room.
// PostFilter asks only when no room was freed since the pod's cycle began: a room freed during
// the cycle is not one the pod failed to take (postfilter.go).
func (p *Plugin) forgetIdleNomination(pod *corev1.Pod) {
	p.mu.Lock()
	n, ok := p.nominations[pod.UID]
	p.mu.Unlock()
	if !ok || !n.byPreemption || p.handle == nil {
		return
	}
	if len(p.awaited(pod, n.node)) == 0 {
		p.mu.Lock()
		p.forgetNominationLocked(pod.UID, n.node)
		p.mu.Unlock()
	}
}
