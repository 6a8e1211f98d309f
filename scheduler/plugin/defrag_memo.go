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
//     (counted by defragInputs, below);
//   - the policy (fixed for the plugin's life).
//
// So an answer is reused for a request equal to the one it was computed for while neither
// counter has moved. Only answers without a plan are kept (NoPlan, Bounded or not, NoCapacity,
// FitsNow, Unsupported): a plan is reported as an Event on each pod and, in Evict mode,
// carried out, so it is looked for per pod as before.

// maxDefragMemo bounds the answers kept for one generation (one per distinct request; the model
// tables have fewer single-slice profiles).
const maxDefragMemo = 64

// memoGen names the state of every planner input that is not the pending pod's.
type memoGen struct{ snapshot, informers uint64 }

// defragMemo holds the answers computed at generation gen, by request.
type defragMemo struct {
	mu      sync.Mutex
	gen     memoGen
	answers map[string]mig.DefragResult
}

// defragGen is the generation of the planner's inputs now. It must be read before any input:
// every counter is bumped once its change is visible to the readers (the snapshot cache under
// its write lock; an informer's handlers run after its store shows the change), so an answer
// is kept under a generation older than any change it did not see, and no kept answer outlives
// the count of a change. An informer's change can be read in its store a moment before its
// handler counts it: an attempt in that moment may get the answer of the state before, as an
// attempt made a moment earlier would.
func (p *Plugin) defragGen() memoGen {
	return memoGen{snapshot: p.cache.Generation(), informers: p.defragInputs.Load()}
}

// defragKey is all the planner reads of the pending pod: its request's slices.
func defragKey(req *mig.Request) string { return strings.Join(req.Slices(), ",") }

// get returns the answer kept for key at generation gen.
func (m *defragMemo) get(key string, gen memoGen) (mig.DefragResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		return mig.DefragResult{}, false
	}
	res, ok := m.answers[key]
	return res, ok
}

// put keeps an answer computed from inputs read at generation gen, unless it holds a plan or
// an input changed while it was computed (now, the generation read after, differs). Answers
// of an older generation are dropped.
func (m *defragMemo) put(key string, gen, now memoGen, res mig.DefragResult) {
	if res.Outcome == mig.DefragPlanned || gen != now {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.answers == nil || m.gen != gen || len(m.answers) >= maxDefragMemo {
		m.gen, m.answers = gen, map[string]mig.DefragResult{}
	}
	m.answers[key] = mig.DefragResult{Outcome: res.Outcome, Bounded: res.Bounded}
}

// watchDefragInputs counts the changes of the planner's informer-fed inputs (defragInputs):
// handlers on the scheduler's own informers, the ones the listers the planner reads are fed
// by.
func (p *Plugin) watchDefragInputs(h fwk.Handle) error {
	f := h.SharedInformerFactory()
	handlers := []struct {
		inf     cache.SharedIndexInformer
		changed func(old, cur any) bool
	}{
		{f.Core().V1().Pods().Informer(), podInputChanged},
		{f.Core().V1().Nodes().Informer(), nodeInputChanged},
		{f.Policy().V1().PodDisruptionBudgets().Informer(), pdbInputChanged},
	}
	if p.defrag.namespaces != nil {
		handlers = append(handlers, struct {
			inf     cache.SharedIndexInformer
			changed func(old, cur any) bool
		}{f.Core().V1().Namespaces().Informer(), namespaceInputChanged})
	}
	for _, hd := range handlers {
		if _, err := hd.inf.AddEventHandler(p.inputHandler(hd.changed)); err != nil {
			return err
		}
	}
	return nil
}

// inputHandler bumps defragInputs on each event that changed says may change an answer (old
// nil: added; cur nil: deleted).
func (p *Plugin) inputHandler(changed func(old, cur any) bool) cache.ResourceEventHandler {
	bump := func(old, cur any) {
		if changed(old, cur) {
			p.defragInputs.Add(1)
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
