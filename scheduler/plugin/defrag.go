package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Defragmentation at PostFilter (docs/design/defragmentation.md): when a MIG pod fits nowhere
// and preemption cannot help, the plugin looks for the fewest moves of movable pods' slices
// (mig.PlanDefrag) after which it would fit. The plan is reported as an Event on the pending
// pod (reason DefragmentationPlanned, which `slicer slice-map` shows under WHY PENDING) and in
// its Pending reason; in Recommend mode nothing is evicted, in Evict mode it is carried out
// (defrag_evict.go).

// defragmenter is defragmentation at PostFilter: the policy, the planner's memo and the
// informer-fed inputs it reads, and in Evict mode the evictor that carries plans out. The
// extension points call sweep and claim (PreFilter), defragment (PostFilter) and forget
// (PostBind, a pod deleted).
type defragmenter struct {
	policy   defragPolicy
	cache    *snapshot.Cache
	metrics  *Metrics
	recorder events.EventRecorder
	log      logr.Logger
	// What the planner reads through the scheduler's informers.
	pods       corelisters.PodLister
	pdbs       policylisters.PodDisruptionBudgetLister
	namespaces corelisters.NamespaceLister
	nodes      corelisters.NodeLister
	// tolerationOps: tolerations may use the Gt and Lt operators (the feature gate
	// TaintTolerationComparisonOperators), for the node filters of defrag_dest.go.
	tolerationOps bool
	// memo keeps the planner's answers without a plan; inputs counts the changes of its
	// informer-fed inputs (defrag_memo.go).
	memo   defragMemo
	inputs atomic.Uint64
	// evictor carries plans out (Evict mode; defrag_evict.go).
	evictor *evictor
	// indexes holds the movability indexes of plans done (*movableIndex), for the next plans to
	// reuse their memory (movableSlices, release). A pool rather than one index under a lock:
	// kube-scheduler runs PostFilter for one pod at a time (k8s.io/kubernetes
	// pkg/scheduler/schedule_one.go, the scheduling cycle), but nothing here relies on it.
	indexes sync.Pool
	// facts remembers what a search asks of every running pod (defrag_slices.go).
	facts podFacts
}

// newDefragmenter builds the plugin's defragmentation on the scheduler's informers; outside
// Disabled mode it counts the changes of the planner's inputs (defrag_memo.go).
func newDefragmenter(h fwk.Handle, pol defragPolicy, c *snapshot.Cache, held *nominations, m *Metrics, log logr.Logger,
	replacementTimeout time.Duration) (*defragmenter, error) {
	f := h.SharedInformerFactory()
	if replacementTimeout <= 0 {
		replacementTimeout = DefaultDefragReplacementTimeout
	}
	d := &defragmenter{policy: pol, cache: c, metrics: m, recorder: h.EventRecorder(), log: log,
		pods: f.Core().V1().Pods().Lister(), pdbs: f.Policy().V1().PodDisruptionBudgets().Lister(),
		namespaces: f.Core().V1().Namespaces().Lister(), nodes: f.Core().V1().Nodes().Lister(),
		tolerationOps: feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate).EnableTaintTolerationComparisonOperators}
	d.evictor = &evictor{handle: h, cache: c, held: held, pods: d.pods, recorder: d.recorder, metrics: m, log: log, policy: pol,
		replacementTimeout: replacementTimeout, now: time.Now,
		run: defragRun{pledges: map[types.UID]*pledge{}, plans: map[types.UID]time.Time{}}}
	if pol.mode != slicerv1alpha1.DefragmentationDisabled {
		if err := d.watchInputs(h); err != nil {
			return nil, fmt.Errorf("watch the defragmentation planner's inputs: %w", err)
		}
	}
	return d, nil
}

// sweep is PreFilter's housekeeping (evictor.sweep): the records restored once, late pledges
// released.
func (d *defragmenter) sweep() { d.evictor.sweep() }

// claim gives a moved pod's replacement the room held for it (evictor.claim).
func (d *defragmenter) claim(log klog.Logger, pod *corev1.Pod, s *podState) *fwk.Status {
	return d.evictor.claim(log, pod, s)
}

// forget drops the pod's plan wait and refusal, and its slice count: it is bound, or gone.
func (d *defragmenter) forget(uid types.UID) {
	d.evictor.forget(uid)
	d.facts.forget(uid)
}

// defragPolicy is spec.defragmentation as the plugin runs it.
type defragPolicy struct {
	mode     slicerv1alpha1.DefragmentationMode
	maxMoves int
	// maxEvictions within windowSeconds caps Evict mode's evictions.
	maxEvictions  int
	windowSeconds int
	// namespaces selects the namespaces whose pods may be moved; nil: every namespace.
	namespaces labels.Selector
}

// newDefragPolicy reads the plugin's arguments; a missing spec or empty field takes the API's
// default (api/v1alpha1/defragmentation_types.go; maxMovesPerPlan's is mig.DefaultDefragMoves).
func newDefragPolicy(spec *slicerv1alpha1.DefragmentationSpec) (defragPolicy, error) {
	pol := defragPolicy{mode: slicerv1alpha1.DefaultDefragmentationMode, maxMoves: mig.DefaultDefragMoves,
		maxEvictions: slicerv1alpha1.DefaultMaxEvictions, windowSeconds: slicerv1alpha1.DefaultEvictionWindowSeconds}
	if spec == nil {
		return pol, nil
	}
	if spec.Mode != "" {
		pol.mode = spec.Mode
	}
	switch pol.mode {
	case slicerv1alpha1.DefragmentationDisabled, slicerv1alpha1.DefragmentationRecommend, slicerv1alpha1.DefragmentationEvict:
	default:
		return pol, fmt.Errorf("defragmentation mode %q: want Disabled, Recommend or Evict", pol.mode)
	}
	if spec.MaxMovesPerPlan > 0 {
		pol.maxMoves = min(int(spec.MaxMovesPerPlan), mig.MaxDefragMoves)
	}
	if spec.MaxEvictions > 0 {
		pol.maxEvictions = int(spec.MaxEvictions)
	}
	if spec.WindowSeconds > 0 {
		pol.windowSeconds = int(spec.WindowSeconds)
	}
	if spec.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(spec.NamespaceSelector)
		if err != nil {
			return pol, fmt.Errorf("defragmentation namespaceSelector: %w", err)
		}
		pol.namespaces = sel
	}
	return pol, nil
}

// movablePod says whether defragmentation may move the pod, and why not: the pod's own rules
// (mig.PodMove, which slicer-sim applies too: a controller that recreates it elsewhere owns it,
// it is not annotated slicer.dev/movable: "false", it is not being deleted, it asks for one
// slice), then the Eviction API would evict it now as its PodDisruptionBudgets stand
// (budgets.go), and its namespace matches the policy's selector (nsLabels: the namespace's
// labels). single says whether the pod asks for exactly one slice (singleSlice, or its memory).
func movablePod(pod *corev1.Pod, single func(*corev1.Pod) bool, pdbs []*policyv1.PodDisruptionBudget, nsLabels map[string]string,
	namespaces labels.Selector) (bool, string) {
	rules := mig.PodMove{AnnotatedUnmovable: pod.Annotations[slicerv1alpha1.AnnotationMovable] == "false", Deleting: pod.DeletionTimestamp != nil}
	owner := metav1.GetControllerOf(pod)
	if owner != nil {
		rules.ControllerKind = owner.Kind
	}
	why := rules.Check()
	if why == mig.ImmovableSlices && single(pod) { // read last: it parses the pod's resources
		rules.Slices = 1
		why = rules.Check()
	}
	switch why {
	case mig.ImmovableBare:
		return false, "no controller owns it"
	case mig.ImmovableSameNode:
		return false, "its " + owner.Kind + " would recreate it on the same node"
	case mig.ImmovableAnnotated:
		return false, slicerv1alpha1.AnnotationMovable + " is \"false\""
	case mig.ImmovableDeleting:
		return false, "it is being deleted"
	case mig.ImmovableSlices:
		return false, "it holds more than one slice (a plan moves single slices)"
	}
	if why := evictionRefused(pod, pdbs); why != "" {
		return false, why
	}
	if namespaces != nil && !namespaces.Matches(labels.Set(nsLabels)) {
		return false, "its namespace is outside spec.defragmentation.namespaceSelector"
	}
	return true, ""
}

// defragment looks for a plan for the pod and reports it (Recommend) or carries it out (Evict,
// defrag_evict.go); it returns the result that nominates the pod (Evict, once pods were
// evicted for it) and the words to add to the pod's Pending reason ("" in Disabled mode).
func (d *defragmenter) defragment(ctx context.Context, pod *corev1.Pod, s *podState) (*fwk.PostFilterResult, string) {
	if d.policy.mode == slicerv1alpha1.DefragmentationDisabled {
		return nil, ""
	}
	if s.adoptedNode != "" {
		return nil, "" // the pod's other slices are on that node already: no move elsewhere helps
	}
	if words := d.evictor.waitingPlan(pod); words != "" {
		return nil, words
	}
	// Read before any input of the planner (defrag_memo.go).
	key, gen := defragKey(s.req), d.gen()
	if res, ok := d.memo.get(key, gen); ok {
		d.metrics.DefragPlans.WithLabelValues(string(res.Outcome)).Inc()
		return nil, d.noPlanWords(res, s)
	}
	start := time.Now()
	nodes := d.cache.Nodes()
	res, movable, spared, err := d.planWithinBudgets(nodes, s)
	defer d.release(movable)
	if words := d.answered(pod, start, res, err); words != "" {
		return nil, words
	}
	if res.Outcome != mig.DefragPlanned {
		if spared == 0 {
			// An answer the budgets took part in is not kept: the search that spares pods is
			// greedy, and the memo's reasoning holds for the planner's answers only.
			d.memo.put(key, gen, d.gen(), res)
		}
		return nil, d.noPlanWords(res, s)
	}
	return d.announce(ctx, pod, nodes, res.Plan, movable, []snapshot.Slot{{Slot: sliceOf(nodes, res.Plan.Target)}})
}

// answered logs a planning error, whose words it returns for the Pending reason, or counts the
// planner's answer and its time since start ("").
func (d *defragmenter) answered(pod *corev1.Pod, start time.Time, res mig.DefragResult, err error) string {
	if err != nil {
		d.log.Error(err, "defragmentation skipped", "pod", klog.KObj(pod))
		return "defragmentation skipped: " + err.Error()
	}
	d.metrics.DefragPlans.WithLabelValues(string(res.Outcome)).Inc()
	d.metrics.DefragPlanDuration.Observe(time.Since(start).Seconds())
	return ""
}

// announce reports a plan, on the pending pod's Event (its tenant reads it there and in its
// Pending reason: tenant.go) and in the log (naming every moved pod), and in Evict mode
// carries it out for the slots it opens for the pod (targets).
func (d *defragmenter) announce(ctx context.Context, pod *corev1.Pod, nodes []*snapshot.Node, plan mig.DefragPlan, movable *movableIndex, targets []snapshot.Slot) (*fwk.PostFilterResult, string) {
	words := describePlan(nodes, plan, movable, func(moved string) string { return podFor(pod.Namespace, moved) })
	d.recorder.Eventf(pod, nil, corev1.EventTypeNormal, slicerv1alpha1.EventDefragmentationPlanned, string(d.policy.mode), "%s", words)
	d.log.V(2).Info("defragmentation plan", "pod", klog.KObj(pod), "moves", len(plan.Moves), "wholeGPUs", len(plan.WholeGPUs),
		"plan", describePlan(nodes, plan, movable, func(moved string) string { return "pod " + moved }))
	if d.policy.evictMode() {
		return d.evictor.execute(ctx, pod, nodes, plan, targets, movable, words)
	}
	return nil, "defragmentation (Recommend, nothing evicted): " + words
}

// maxBudgetReplans bounds how many times a plan is looked for again with one more moved pod
// spared because the PodDisruptionBudgets would refuse the plan's evictions together.
const maxBudgetReplans = 8

// planWithinBudgets asks the planner for a plan whose evictions the Eviction API would all
// allow, as the budgets stand (evictionRefusal): each pod alone is movable only when its budget
// allows its eviction (movablePod); when a plan's moves together take a budget below what it
// allows, the pod refused is spared (not movable) and the planner asked again, as
// DefaultPreemption reprieves victims pod by pod. After maxBudgetReplans the answer is NoPlan,
// Bounded. A node whose driver lacks the pod's profile (driverLacks) is shown to the planner
// with no usable GPU: the room opened must be one Filter accepts. It returns the answer, the
// movability index of the plan's search (to release once read) and how many pods were spared.
func (d *defragmenter) planWithinBudgets(nodes []*snapshot.Node, s *podState) (mig.DefragResult, *movableIndex, int, error) {
	req := s.req
	return d.planWithin(nodes, s, func(in []mig.Node, m *movableIndex) mig.DefragResult {
		return mig.PlanDefrag(in, req, m.at, mig.DefragOptions{MaxMoves: d.policy.maxMoves,
			Destinations: m.destinations, DestinationClass: m.destinationClass, RepackGPUs: mig.DefaultRepackGPUs})
	})
}

// planWithin is planWithinBudgets with the planner given: PlanDefrag for a pod of slices,
// PlanWholeDefrag for one of whole GPUs (defrag_whole.go).
func (d *defragmenter) planWithin(nodes []*snapshot.Node, s *podState, planner func([]mig.Node, *movableIndex) mig.DefragResult) (mig.DefragResult, *movableIndex, int, error) {
	movable := d.movableSlices(nodes)
	in := movable.in
	for i, n := range nodes {
		in[i] = n.MIG
		if s.whole == 0 && driverLacks(n, s) != "" {
			in[i] = mig.Node{GPUs: slices.Clone(n.MIG.GPUs)}
			for g := range in[i].GPUs {
				in[i].GPUs[g].Usable = false
			}
		}
	}
	for {
		pdbs, err := d.pdbs.List(labels.Everything())
		if err != nil {
			d.release(movable)
			return mig.DefragResult{}, nil, 0, fmt.Errorf("list PodDisruptionBudgets: %w", err)
		}
		movable.pdbs = pdbs
		res := planner(in, movable)
		if res.Outcome != mig.DefragPlanned {
			return res, movable, len(movable.spared), nil
		}
		moved := make([]*corev1.Pod, 0, len(res.Plan.Moves))
		for _, mv := range res.Plan.Moves {
			moved = append(moved, movable.podAt(mv.From))
		}
		k, _ := evictionRefusal(moved, movable.pdbs)
		if k < 0 {
			return res, movable, len(movable.spared), nil
		}
		if len(movable.spared) == maxBudgetReplans {
			return mig.DefragResult{Outcome: mig.DefragNoPlan, Bounded: true}, movable, len(movable.spared), nil
		}
		movable.spare(moved[k].UID)
	}
}

// noPlanWords is the Pending reason's tail for an answer without a plan ("" for FitsNow).
func (d *defragmenter) noPlanWords(res mig.DefragResult, s *podState) string {
	switch res.Outcome {
	case mig.DefragNoCapacity:
		return "defragmentation cannot help: the free compute and memory of the GPUs that offer " + describe(s.slices) + " are not enough"
	case mig.DefragNoPlan:
		if res.Bounded {
			return fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods before its work bound", d.policy.maxMoves)
		}
		return fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", d.policy.maxMoves)
	case mig.DefragUnsupported:
		return "defragmentation plans for pods of one slice only"
	}
	return ""
}

// movableIndex answers mig.MovableFunc from the snapshot's claim at each slice asked about
// (snapshot.Cache.ClaimAt) and the scheduler's listers. One serves a plan's searches (each
// search after the first with one more pod spared) and is then released for a later plan to
// reuse its memory: on 5,000 nodes × 8 GPUs its pods, classes and the planner's nodes are
// megabytes a plan, written fresh otherwise (mig.SliceIndex says why that costs;
// docs/benchmarks.md has the figures).
type movableIndex struct {
	d     *defragmenter
	nodes []*snapshot.Node
	pdbs  []*policyv1.PodDisruptionBudget
	// in is the planner's view of nodes (planWithinBudgets).
	in []mig.Node
	// spared pods are not movable (planWithinBudgets).
	spared map[types.UID]bool
	// lacks: some node's driver lacks a profile (snapshot.Node.Lacks), so a moved slice's
	// destinations depend on its profile too (defrag_dest.go).
	lacks bool
	// pods remembers the movable pods found at the slices asked about, for destinations,
	// destinationClass and the plan's words (the planner asks about thousands of slices per
	// plan on a large crowded cluster).
	pods mig.SliceIndex[*corev1.Pod]
	// classes memoizes destinationClass per pod, classIDs numbers its classes.
	classes  map[*corev1.Pod]int
	classIDs map[string]int
}

// podAt is the movable pod found at the slice s, nil when none was.
func (m *movableIndex) podAt(s mig.SliceAt) *corev1.Pod {
	pod, _ := m.pods.At(s)
	return pod
}

// movableSlices is the movability index of a plan's first search on nodes (its budgets set by
// the caller): one released before (release), emptied, or a new one.
func (d *defragmenter) movableSlices(nodes []*snapshot.Node) *movableIndex {
	m, _ := d.indexes.Get().(*movableIndex)
	if m == nil {
		m = &movableIndex{spared: map[types.UID]bool{}, classes: map[*corev1.Pod]int{}, classIDs: map[string]int{}}
	}
	m.d, m.nodes, m.lacks = d, nodes, false
	if cap(m.in) < len(nodes) {
		m.in = make([]mig.Node, len(nodes))
	}
	m.in = m.in[:len(nodes)]
	m.pods.Reset(len(nodes))
	for _, n := range nodes {
		m.lacks = m.lacks || n.Lacks != nil
	}
	return m
}

// spare makes the pod not movable for the plan's next search, which starts afresh.
func (m *movableIndex) spare(uid types.UID) {
	m.spared[uid] = true
	m.pods.Reset(len(m.nodes))
	clear(m.classes)
	clear(m.classIDs)
}

// release hands m back for a later plan once nothing reads it (nil: nothing to hand back); it
// keeps no reference to the plan's nodes, pods or budgets.
func (d *defragmenter) release(m *movableIndex) {
	if m == nil {
		return
	}
	m.d, m.nodes, m.pdbs = nil, nil, nil
	clear(m.in)
	m.pods.Reset(0)
	clear(m.spared)
	clear(m.classes)
	clear(m.classIDs)
	d.indexes.Put(m)
}

// at implements mig.MovableFunc: the slice is held by an allocation (not a reservation being
// bound, nor a slice being released) of a pod that movablePod allows.
func (m *movableIndex) at(node, gpu int, prof mig.Profile, pl mig.Placement) bool {
	n := m.nodes[node]
	c, ok := m.d.cache.ClaimAt(n.Name, mig.Slot{GPU: n.GPUs[gpu].UUID, Profile: prof.Name, Placement: pl})
	if !ok || c.Leaving || c.PodUID == "" {
		return false
	}
	ns, name, _ := strings.Cut(c.Pod, "/")
	pod, err := m.d.pods.Pods(ns).Get(name)
	if err != nil || pod.UID != c.PodUID || pod.Spec.NodeName == "" || m.spared[pod.UID] {
		return false
	}
	var nsLabels map[string]string
	if m.d.policy.namespaces != nil {
		o, err := m.d.namespaces.Get(ns)
		if err != nil {
			return false
		}
		nsLabels = o.Labels
	}
	ok, _ = movablePod(pod, m.d.facts.singleSlice, m.pdbs, nsLabels, m.d.policy.namespaces)
	if ok {
		m.pods.Add(node, gpu, pl.Start, pod)
	}
	return ok
}

// describePlan words a plan: each move (the moved pod as name words it, from "namespace/name";
// profile, from, to), then where the pod fits.
func describePlan(nodes []*snapshot.Node, plan mig.DefragPlan, m *movableIndex, name func(string) string) string {
	where := func(s mig.SliceAt) string {
		n := nodes[s.Node]
		return fmt.Sprintf("node %s GPU %d @%d", n.Name, n.GPUs[s.GPU].Index, s.Placement.Start)
	}
	parts := make([]string, 0, len(plan.Moves)+1)
	for _, mv := range plan.Moves {
		f := mv.From
		who := "a slice"
		if pod := m.podAt(f); pod != nil {
			who = name(pod.Namespace + "/" + pod.Name)
		}
		parts = append(parts, fmt.Sprintf("move %s (%s) from %s to %s", who, mig.LegalProfileName(f.Profile.Name), where(f), where(mv.To)))
	}
	t := plan.Target
	kind := ""
	if plan.Ordered {
		kind = ", some into room the others leave"
	}
	if len(plan.WholeGPUs) > 0 {
		n := nodes[t.Node]
		idx := make([]string, len(plan.WholeGPUs))
		for i, g := range plan.WholeGPUs {
			idx[i] = fmt.Sprint(n.GPUs[g].Index)
		}
		return fmt.Sprintf("%d move(s): %s; then GPU(s) %s of node %s are empty for %d whole GPU(s)", len(plan.Moves), strings.Join(parts, ", "),
			strings.Join(idx, ", "), n.Name, len(plan.WholeGPUs))
	}
	return fmt.Sprintf("%d move(s)%s: %s; then %s fits on %s", len(plan.Moves), kind, strings.Join(parts, ", "),
		mig.LegalProfileName(t.Profile.Name), where(t))
}
