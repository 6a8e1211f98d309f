package plugin

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// nomination is the placement cleared or held for a pod on a node, by preemption or by a
// defragmentation plan: AddPod gives it to the nominated pod while its victims terminate,
// Reserve prefers it for the pod itself, Score prefers its node, and Filter and Reserve keep
// pods of lower or equal priority off it while it is held (heldOverlay). Memory only, but for a
// defragmentation plan's pod, whose nomination its plan's record restores (defrag_record.go):
// after a restart a nominated pod is placed where the policy would place it (placeAdded).
type nomination struct {
	node      string
	slots     []snapshot.Slot
	namespace string
	name      string
	priority  int32
	kind      nominationKind
	// until: a plan's nomination is held until its moves' deadline.
	until time.Time
}

// nominationKind says who made a nomination, and so how long heldOverlay holds it.
type nominationKind int

const (
	// byPreemption: the room preemption cleared, held until PostFilter finds the pod waits for
	// nothing there (preemptor.forgetIdle).
	byPreemption nominationKind = iota + 1
	// byPlan: the room a defragmentation plan opens for its pending pod, held until the
	// plan's deadline.
	byPlan
	// byReplacement: the room held for a moved pod, given to its replacement; not held
	// against other pods once given (a replacement that cannot go there is placed by the policy).
	byReplacement
)

// holds reports whether heldOverlay keeps other pods off the nomination at now.
func (n nomination) holds(now time.Time) bool {
	return n.kind == byPreemption || (n.kind == byPlan && now.Before(n.until))
}

// nominations are the rooms held for nominated pods, shared by preemption, defragmentation and
// the extension points that place pods (Filter, Score, Reserve, AddPod). Safe for concurrent use.
type nominations struct {
	mu    sync.Mutex
	byPod map[types.UID]nomination
	// nodes is the set of nodes in byPod, read by Filter on every node without the lock.
	nodes atomic.Pointer[map[string]bool]
}

func newNominations() *nominations {
	return &nominations{byPod: map[types.UID]nomination{}}
}

// slots returns the placement held for the pod on the node, or nil.
func (ns *nominations) slots(uid types.UID, node string) []snapshot.Slot {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n, ok := ns.byPod[uid]
	if !ok || n.node != node {
		return nil
	}
	return slices.Clone(n.slots)
}

// get returns the pod's nomination.
func (ns *nominations) get(uid types.UID) (nomination, bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n, ok := ns.byPod[uid]
	return n, ok
}

// set records the placement held for the pod (nil slots forget it); until is a plan's deadline.
func (ns *nominations) set(pod *corev1.Pod, node string, slots []snapshot.Slot, kind nominationKind, until time.Time) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if slots == nil {
		ns.forgetLocked(pod.UID, "")
		return
	}
	ns.byPod[pod.UID] = nomination{node: node, slots: slots, namespace: pod.Namespace, name: pod.Name,
		priority: corev1helpers.PodPriority(pod), kind: kind, until: until}
	ns.index()
}

// forget drops the pod's nomination (only the one on node, unless node is empty).
func (ns *nominations) forget(uid types.UID, node string) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.forgetLocked(uid, node)
}

func (ns *nominations) forgetLocked(uid types.UID, node string) {
	if n, ok := ns.byPod[uid]; ok && (node == "" || n.node == node) {
		delete(ns.byPod, uid)
		ns.index()
	}
}

// index publishes the nodes that have nominations; ns.mu held.
func (ns *nominations) index() {
	nodes := make(map[string]bool, len(ns.byPod))
	for _, n := range ns.byPod {
		nodes[n.node] = true
	}
	ns.nodes.Store(&nodes)
}

// on reports whether any pod has a nomination on the node.
func (ns *nominations) on(node string) bool {
	nodes := ns.nodes.Load()
	return nodes != nil && (*nodes)[node]
}

// heldRoom is a nomination held against other pods, with its pod's UID.
type heldRoom struct {
	uid types.UID
	n   nomination
}

// heldOn lists the nominations on the node held at now for pods other than except, of priority
// prio or more.
func (ns *nominations) heldOn(node string, except types.UID, prio int32, now time.Time) []heldRoom {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	var out []heldRoom
	for uid, n := range ns.byPod {
		if n.node == node && uid != except && n.priority >= prio && n.holds(now) {
			out = append(out, heldRoom{uid, n})
		}
	}
	return out
}

// heldOverlay returns ov with the rooms held on the node for other nominated pods (preemption's,
// and a defragmentation plan's while its moves are under way) added, for the pods of equal or
// higher priority than pod that the framework did not add itself; nil when it adds none (ov
// itself is never changed: the framework filters nodes in parallel on one cycle state). A plan
// holds its moved pods' destinations otherwise (pledges, defrag_evict.go). The framework's own
// nomination of a plan's pod may also be missing after a scheduler restart (the plan's record
// restores the plugin's, defrag_record.go) or before its nominatedNodeName update is written.
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
// for a plan's, until the plan's moves time out.
func (p *Plugin) heldOverlay(ov *nodeOverlay, node string, pod *corev1.Pod) *nodeOverlay {
	if !p.held.on(node) {
		return nil
	}
	var out *nodeOverlay
	for _, h := range p.held.heldOn(node, pod.UID, corev1helpers.PodPriority(pod), p.clock()) {
		if ov != nil {
			if _, ok := ov.added[h.uid]; ok {
				continue
			}
		}
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
	p.held.forget(uid, n.node)
	return false
}
