package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Defragmentation at PostFilter (docs/design/defragmentation.md): when a MIG pod fits nowhere
// and preemption cannot help, the plugin looks for the fewest moves of movable pods' slices
// (mig.PlanDefrag) after which it would fit. The plan is reported as an Event on the pending
// pod (reason DefragmentationPlanned, which `slicer slice-map` shows under WHY PENDING) and in
// its Pending reason; in Recommend mode nothing is evicted, in Evict mode it is carried out
// (defrag_evict.go).

// The CRD's defaults of maxEvictions and windowSeconds (api/v1alpha1/defragmentation_types.go),
// for a configuration that carries none.
const (
	defaultMaxEvictions          = 10
	defaultEvictionWindowSeconds = 3600
)

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

// newDefragPolicy reads the plugin's arguments; empty fields take the API's defaults.
func newDefragPolicy(spec *slicerv1alpha1.DefragmentationSpec) (defragPolicy, error) {
	pol := defragPolicy{mode: slicerv1alpha1.DefragmentationRecommend, maxMoves: mig.DefaultDefragMoves,
		maxEvictions: defaultMaxEvictions, windowSeconds: defaultEvictionWindowSeconds}
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
// slice), then no PodDisruptionBudget forbids its eviction now, and its namespace matches the
// policy's selector (nsLabels: the namespace's labels).
func movablePod(pod *corev1.Pod, pdbs []*policyv1.PodDisruptionBudget, nsLabels map[string]string, namespaces labels.Selector) (bool, string) {
	rules := mig.PodMove{AnnotatedUnmovable: pod.Annotations[slicerv1alpha1.AnnotationMovable] == "false", Deleting: pod.DeletionTimestamp != nil}
	owner := metav1.GetControllerOf(pod)
	if owner != nil {
		rules.ControllerKind = owner.Kind
	}
	why := rules.Check()
	if why == mig.ImmovableSlices && singleSlice(pod) { // read last: it parses the pod's resources
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
	switch {
	case pdbProtects(pod, pdbs):
		return false, "a PodDisruptionBudget allows no disruption"
	case namespaces != nil && !namespaces.Matches(labels.Set(nsLabels)):
		return false, "its namespace is outside spec.defragmentation.namespaceSelector"
	}
	return true, ""
}

// defragment looks for a plan for the pod and reports it (Recommend) or carries it out (Evict,
// defrag_evict.go); it returns the result that nominates the pod (Evict, once pods were
// evicted for it) and the words to add to the pod's Pending reason ("" in Disabled mode).
func (p *Plugin) defragment(ctx context.Context, pod *corev1.Pod, s *podState) (*fwk.PostFilterResult, string) {
	if p.defrag.mode == slicerv1alpha1.DefragmentationDisabled {
		return nil, ""
	}
	if s.adoptedNode != "" {
		return nil, "" // the pod's other slices are on that node already: no move elsewhere helps
	}
	if words := p.waitingPlan(pod); words != "" {
		return nil, words
	}
	// Read before any input of the planner (defrag_memo.go).
	key, gen := defragKey(s.req), p.defragGen()
	if res, ok := p.defragMemo.get(key, gen); ok {
		p.metrics.DefragPlans.WithLabelValues(string(res.Outcome)).Inc()
		return nil, p.noPlanWords(res, s)
	}
	start := time.Now()
	nodes := p.cache.Nodes()
	in := make([]mig.Node, len(nodes))
	for i, n := range nodes {
		in[i] = n.MIG
	}
	movable, err := p.movableSlices(nodes)
	if err != nil {
		p.log.Error(err, "defragmentation skipped", "pod", klog.KObj(pod))
		return nil, "defragmentation skipped: " + err.Error()
	}
	res := mig.PlanDefrag(in, s.req, movable.at, mig.DefragOptions{MaxMoves: p.defrag.maxMoves,
		Destinations: movable.destinations, DestinationClass: movable.destinationClass, RepackGPUs: mig.DefaultRepackGPUs})
	p.metrics.DefragPlans.WithLabelValues(string(res.Outcome)).Inc()
	p.metrics.DefragPlanDuration.Observe(time.Since(start).Seconds())
	if res.Outcome != mig.DefragPlanned {
		p.defragMemo.put(key, gen, p.defragGen(), res)
		return nil, p.noPlanWords(res, s)
	}
	plan := describePlan(nodes, res.Plan, movable)
	p.recorder.Eventf(pod, nil, corev1.EventTypeNormal, slicerv1alpha1.EventDefragmentationPlanned, string(p.defrag.mode), "%s", plan)
	p.log.V(2).Info("defragmentation plan", "pod", klog.KObj(pod), "moves", len(res.Plan.Moves), "plan", plan)
	if p.defrag.evictMode() {
		return p.execute(ctx, pod, nodes, res.Plan, movable, plan)
	}
	return nil, "defragmentation (Recommend, nothing evicted): " + plan
}

// noPlanWords is the Pending reason's tail for an answer without a plan ("" for FitsNow).
func (p *Plugin) noPlanWords(res mig.DefragResult, s *podState) string {
	switch res.Outcome {
	case mig.DefragNoCapacity:
		return "defragmentation cannot help: the free compute and memory of the GPUs that offer " + describe(s.slices) + " are not enough"
	case mig.DefragNoPlan:
		if res.Bounded {
			return fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods before its work bound", p.defrag.maxMoves)
		}
		return fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", p.defrag.maxMoves)
	case mig.DefragUnsupported:
		return "defragmentation plans for pods of one slice only"
	}
	return ""
}

// movableIndex answers mig.MovableFunc from the snapshot's claim at each slice asked about
// (snapshot.Cache.ClaimAt) and the scheduler's listers.
type movableIndex struct {
	p     *Plugin
	nodes []*snapshot.Node
	pdbs  []*policyv1.PodDisruptionBudget
	// pods remembers the movable pods found at the slices asked about (for destinations,
	// destinationClass and the plan's words): a list per node threaded through one slice
	// (head: per node index, 1 + the index of its last pod found, 0 when none), read back
	// without hashing a slot and filled without an allocation per node (the planner asks about
	// thousands of slices per plan on a large crowded cluster).
	pods []podAt
	head []int32
	// classes memoizes destinationClass per pod, classIDs numbers its classes.
	classes  map[*corev1.Pod]int
	classIDs map[string]int
}

// podAt is a movable pod found at a slice: its GPU index on the node, its placement's start,
// and 1 + the index of the node's pod found before it (0: none).
type podAt struct {
	gpu, start int32
	prev       int32
	pod        *corev1.Pod
}

// podAt is the movable pod found at the slice s, nil when none was.
func (m *movableIndex) podAt(s mig.SliceAt) *corev1.Pod {
	if s.Node < 0 || s.Node >= len(m.head) {
		return nil
	}
	for i := m.head[s.Node]; i != 0; {
		e := &m.pods[i-1]
		if int(e.gpu) == s.GPU && int(e.start) == s.Placement.Start {
			return e.pod
		}
		i = e.prev
	}
	return nil
}

func (p *Plugin) movableSlices(nodes []*snapshot.Node) (*movableIndex, error) {
	pdbs, err := p.pdbs.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets: %w", err)
	}
	return &movableIndex{p: p, nodes: nodes, pdbs: pdbs, head: make([]int32, len(nodes)),
		classes: map[*corev1.Pod]int{}, classIDs: map[string]int{}}, nil
}

// at implements mig.MovableFunc: the slice is held by an allocation (not a reservation being
// bound, nor a slice being released) of a pod that movablePod allows.
func (m *movableIndex) at(node, gpu int, prof mig.Profile, pl mig.Placement) bool {
	n := m.nodes[node]
	c, ok := m.p.cache.ClaimAt(n.Name, mig.Slot{GPU: n.GPUs[gpu].UUID, Profile: prof.Name, Placement: pl})
	if !ok || c.Leaving || c.PodUID == "" {
		return false
	}
	ns, name, _ := strings.Cut(c.Pod, "/")
	pod, err := m.p.pods.Pods(ns).Get(name)
	if err != nil || pod.UID != c.PodUID || pod.Spec.NodeName == "" {
		return false
	}
	var nsLabels map[string]string
	if m.p.defrag.namespaces != nil {
		o, err := m.p.namespaces.Get(ns)
		if err != nil {
			return false
		}
		nsLabels = o.Labels
	}
	ok, _ = movablePod(pod, m.pdbs, nsLabels, m.p.defrag.namespaces)
	if ok {
		m.pods = append(m.pods, podAt{gpu: int32(gpu), start: int32(pl.Start), prev: m.head[node], pod: pod})
		m.head[node] = int32(len(m.pods))
	}
	return ok
}

// describePlan words a plan: each move (pod, profile, from, to), then where the pod fits.
func describePlan(nodes []*snapshot.Node, plan mig.DefragPlan, m *movableIndex) string {
	where := func(s mig.SliceAt) string {
		n := nodes[s.Node]
		return fmt.Sprintf("node %s GPU %d @%d", n.Name, n.GPUs[s.GPU].Index, s.Placement.Start)
	}
	parts := make([]string, 0, len(plan.Moves)+1)
	for _, mv := range plan.Moves {
		f := mv.From
		who := "a slice"
		if pod := m.podAt(f); pod != nil {
			who = "pod " + pod.Namespace + "/" + pod.Name
		}
		parts = append(parts, fmt.Sprintf("move %s (%s) from %s to %s", who, mig.LegalProfileName(f.Profile.Name), where(f), where(mv.To)))
	}
	t := plan.Target
	kind := ""
	if plan.Ordered {
		kind = ", some into room the others leave"
	}
	return fmt.Sprintf("%d move(s)%s: %s; then %s fits on %s", len(plan.Moves), kind, strings.Join(parts, ", "),
		mig.LegalProfileName(t.Profile.Name), where(t))
}

// singleSlice reports whether the pod asks for exactly one MIG slice.
func singleSlice(pod *corev1.Pod) bool {
	need, err := podrequest.ForPod(&pod.Spec)
	return err == nil && need.Slices() == 1
}
