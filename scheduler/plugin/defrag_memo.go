package plugin

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Reusing the planner's answers (docs/design/defragmentation.md, "Reusing the planner's
// answers"): every scheduling attempt of a pending MIG pod that fits nowhere asks the planner,
// and on a crowded cluster where no plan exists a call costs tens of milliseconds, each pending
// pod of the same request getting the same answer. PlanDefrag is deterministic; what it reads:
//
//   - of the pending pod, its request (s.req) only: not its namespace, labels or node filters
//     (the plan's target is any node; the pod's own filters are checked when it lands);
//   - the snapshot cache: every node's mig.Node and each examined node's claims
//     (snapshot.Cache.Generation counts their changes);
//   - through the scheduler's informers: the pods at the examined slices (movablePod, and
//     their node filters in defrag_dest.go), the PodDisruptionBudgets, the namespaces' labels
//     when spec.defragmentation.namespaceSelector is set, and the Node objects nodeAdmits reads
//     (counted by inputs, below);
//   - the policy (fixed for the plugin's life).
//
// So an answer is reused for a request equal to the one it was computed for while the
// informers' counter has not moved and the snapshot has not changed in a way that may free
// room (snapshot.Cache.FreedGeneration: an allocation deleted or moved, a reservation dropped,
// a NodeAccelerator added or changed so). A change of the snapshot that only takes room (an
// allocation or reservation added, a created allocation shown, a GPU lost) cannot make a plan
// appear: every plan on the fuller state, less its moves of the slices added, is a plan of no
// more moves on the emptier one, whose free places are a superset and whose movable slices are
// the same (movability is read through the informers, whose changes are counted). So NoPlan,
// Bounded or not, NoCapacity and Unsupported are reused across such changes, and FitsNow,
// which room taken can make false, only while the snapshot is unchanged. A reused NoPlan may
// by then be a NoCapacity, and a reused Bounded answer is not searched again until room frees
// or an input changes. Only answers without a plan are kept: a plan is reported as an Event
// on each pod and, in Evict mode, carried out, so it is looked for per pod as before.

// maxDefragMemo bounds the answers kept (one per distinct request; the model tables have fewer
// single-slice profiles).
const maxDefragMemo = 64

// memoGen names the state of every planner input that is not the pending pod's: the snapshot's
// Generation and FreedGeneration, and the informers' counter.
type memoGen struct{ snapshot, freed, informers uint64 }

// memoBase is what every kept answer shares: no room freed and no informer input changed since.
type memoBase struct{ freed, informers uint64 }

func (g memoGen) base() memoBase { return memoBase{freed: g.freed, informers: g.informers} }

// memoAnswer is a kept answer and the snapshot generation it was computed at.
type memoAnswer struct {
	res      mig.DefragResult
	snapshot uint64
}

// defragMemo holds the answers computed since base, by request.
type defragMemo struct {
	mu      sync.Mutex
	base    memoBase
	answers map[string]memoAnswer
}

// gen is the generation of the planner's inputs now. It must be read before any input:
// every counter is bumped once its change is visible to the readers (the snapshot cache's
// Generation under its write lock, FreedGeneration just after; an informer's handlers run
// after its store shows the change), so an answer is kept under a generation older than any
// change it did not see, and no kept answer outlives the count of a change. A change can be
// read a moment before it is counted (an informer's store before its handler; room freed in the
// snapshot before FreedGeneration): an attempt in that moment may get the answer of the state
// before, as an attempt made a moment earlier would, and the count that follows wakes the
// pending pods again (the snapshot's OnFreed; the informers' events).
func (d *defragmenter) gen() memoGen {
	return memoGen{snapshot: d.cache.Generation(), freed: d.cache.FreedGeneration(), informers: d.inputs.Load()}
}

// defragKey is all the planner reads of the pending pod: its request's slices.
func defragKey(req *mig.Request) string { return strings.Join(req.Slices(), ",") }

// holdsWhileRoomIsTaken reports whether an answer stays true when the snapshot only takes room.
func holdsWhileRoomIsTaken(o mig.DefragOutcome) bool { return o != mig.DefragFitsNow }

// get returns the answer kept for key that holds at generation now.
func (m *defragMemo) get(key string, now memoGen) (mig.DefragResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.base != now.base() {
		return mig.DefragResult{}, false
	}
	a, ok := m.answers[key]
	if !ok || (a.snapshot != now.snapshot && !holdsWhileRoomIsTaken(a.res.Outcome)) {
		return mig.DefragResult{}, false
	}
	return a.res, true
}

// put keeps an answer computed from inputs read at generation gen, unless it holds a plan or
// an input changed while it was computed (now, the generation read after, differs in any
// counter). Answers kept since another base are dropped.
func (m *defragMemo) put(key string, gen, now memoGen, res mig.DefragResult) {
	if res.Outcome == mig.DefragPlanned || gen != now {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.answers == nil || m.base != gen.base() || len(m.answers) >= maxDefragMemo {
		m.base, m.answers = gen.base(), map[string]memoAnswer{}
	}
	m.answers[key] = memoAnswer{res: mig.DefragResult{Outcome: res.Outcome, Bounded: res.Bounded}, snapshot: gen.snapshot}
}

// watchInputs counts the changes of the planner's informer-fed inputs (inputs):
// handlers on the scheduler's own informers, the ones the listers the planner reads are fed
// by.
func (d *defragmenter) watchInputs(h fwk.Handle) error {
	f := h.SharedInformerFactory()
	handlers := []struct {
		inf     cache.SharedIndexInformer
		changed func(old, cur any) bool
	}{
		{f.Core().V1().Pods().Informer(), podInputChanged},
		{f.Core().V1().Nodes().Informer(), nodeInputChanged},
		{f.Policy().V1().PodDisruptionBudgets().Informer(), pdbInputChanged},
	}
	if d.policy.namespaces != nil {
		handlers = append(handlers, struct {
			inf     cache.SharedIndexInformer
			changed func(old, cur any) bool
		}{f.Core().V1().Namespaces().Informer(), namespaceInputChanged})
	}
	for _, hd := range handlers {
		if _, err := hd.inf.AddEventHandler(d.inputHandler(hd.changed)); err != nil {
			return err
		}
	}
	return nil
}

// inputHandler bumps inputs on each event that changed says may change an answer (old
// nil: added; cur nil: deleted).
func (d *defragmenter) inputHandler(changed func(old, cur any) bool) cache.ResourceEventHandler {
	bump := func(old, cur any) {
		if changed(old, cur) {
			d.inputs.Add(1)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { bump(nil, obj) },
		UpdateFunc: bump,
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			bump(obj, nil)
		},
	}
}

// podInputChanged: the planner reads a pod only when a claim of the snapshot names it, and
// only a bound pod that asks for a slice can be moved (movableIndex.at, movablePod); of it,
// its UID, labels (PodDisruptionBudgets), annotations (slicer.dev/movable), owners, deletion
// and spec (one slice; the node filters). A pending pod's status, written at every failed
// attempt, changes nothing; neither does a running pod's status.
func podInputChanged(old, cur any) bool {
	o, _ := old.(*corev1.Pod)
	c, _ := cur.(*corev1.Pod)
	bound := func(p *corev1.Pod) bool { return p != nil && p.Spec.NodeName != "" }
	asks := func(p *corev1.Pod) bool { return p != nil && hasMIGRequest(p) }
	switch {
	case (old != nil && o == nil) || (cur != nil && c == nil):
		return true // not a pod: count it
	case !bound(o) && !bound(c), !asks(o) && !asks(c):
		return false
	case o == nil || c == nil:
		return true
	}
	return o.UID != c.UID || (o.DeletionTimestamp == nil) != (c.DeletionTimestamp == nil) ||
		!equality.Semantic.DeepEqual(o.Labels, c.Labels) || !equality.Semantic.DeepEqual(o.Annotations, c.Annotations) ||
		!equality.Semantic.DeepEqual(o.OwnerReferences, c.OwnerReferences) || !equality.Semantic.DeepEqual(o.Spec, c.Spec)
}

// nodeInputChanged: nodeAdmits reads a Node's spec.unschedulable, labels and taints; a node
// added or deleted counts. Status updates (heartbeats, conditions) do not.
func nodeInputChanged(old, cur any) bool {
	o, okO := old.(*corev1.Node)
	c, okC := cur.(*corev1.Node)
	if !okO || !okC {
		return true
	}
	return o.Spec.Unschedulable != c.Spec.Unschedulable || !equality.Semantic.DeepEqual(o.Labels, c.Labels) ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, c.Spec.Taints)
}

// pdbInputChanged: movablePod reads a budget's namespace (fixed), selector, allowed
// disruptions and disrupted pods (pdbMatches, pdbProtects); a budget added or deleted counts.
func pdbInputChanged(old, cur any) bool {
	o, okO := old.(*policyv1.PodDisruptionBudget)
	c, okC := cur.(*policyv1.PodDisruptionBudget)
	if !okO || !okC {
		return true
	}
	return o.Status.DisruptionsAllowed != c.Status.DisruptionsAllowed ||
		!equality.Semantic.DeepEqual(o.Spec.Selector, c.Spec.Selector) ||
		!equality.Semantic.DeepEqual(o.Status.DisruptedPods, c.Status.DisruptedPods)
}

// namespaceInputChanged: the namespace selector reads a namespace's labels.
func namespaceInputChanged(old, cur any) bool {
	o, okO := old.(*corev1.Namespace)
	c, okC := cur.(*corev1.Namespace)
	if !okO || !okC {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Labels, c.Labels)
}
