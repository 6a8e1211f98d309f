package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Slicer's preemption: kube-scheduler's preemption evaluator (dry run on candidate nodes,
// PDB-aware choice of the node, deleting the victims, nominating the pod) with Slicer's choice
// of victims on each node: the GPU and legal placement whose holders are the fewest, then of
// the lowest priority (mig.PlanPreemption), never a pod of equal or higher priority. The
// SelectVictimsOnNode of each Kubernetes minor is in preempt_victims*.go, the evaluator's
// constructor in preempt_evaluator*.go.

// DefaultPreemption's defaults (MinCandidateNodesPercentage, MinCandidateNodesAbsolute).
const (
	minCandidateNodesPercentage = 10
	minCandidateNodesAbsolute   = 100
	// maxWaits is how many awaited pods or slices the Pending reason names.
	maxWaits = 5
)

// preemptor is Slicer's preemption, kube-scheduler's evaluator over Slicer's choice of victims
// (as kubernetes-sigs/scheduler-plugins' capacity scheduling plugs its own into the evaluator):
// it implements preemption.Interface, and PostFilter calls preempt. Its own state is what a dry
// run planned per node; the rooms it clears are kept in the plugin's nominations.
type preemptor struct {
	handle    fwk.Handle
	cache     *snapshot.Cache
	held      *nominations
	evaluator *preemption.Evaluator

	mu sync.Mutex
	// dryRun are the placements planned per node during a dry run, by preemptor pod.
	dryRun map[types.UID]map[string]dryPlan
}

var _ preemption.Interface = &preemptor{}

func newPreemptor(h fwk.Handle, cache *snapshot.Cache, held *nominations) *preemptor {
	pr := &preemptor{handle: h, cache: cache, held: held, dryRun: map[types.UID]map[string]dryPlan{}}
	pr.evaluator = newEvaluator(h, pr)
	return pr
}

// preempt runs the evaluator for a pod that fits nowhere (PostFilter): on success the pod is
// nominated to the node, the placement cleared for it kept (nominations.go) and the status's
// message is its Pending reason; otherwise the status says why preemption cannot help or what
// it waits for, and the result is what the framework should do with the pod's nomination.
func (pr *preemptor) preempt(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader, s *podState) (*fwk.PostFilterResult, *fwk.Status) {
	res, st := pr.evaluator.Preempt(ctx, cs, pod, m)
	node := ""
	if st.IsSuccess() && res != nil && res.NominatingInfo != nil {
		node = res.NominatedNodeName
	}
	plan := pr.keepDryRun(pod, node)
	switch {
	case st.IsSuccess():
		klog.FromContext(ctx).V(2).Info("preempting for MIG slices", "pod", klog.KObj(pod), "node", node, "slots", plan.slots, "victims", plan.victims)
		return res, fwk.NewStatus(fwk.Success, preemptingMessage(pod.Namespace, node, plan))
	case st.Code() == fwk.Error:
		return nil, st
	}
	if pr.cache.FreedGeneration() == s.freedGen {
		pr.forgetIdle(pod)
	} else {
		// Room was freed while the pod was judged: the room cleared for it may have freed after
		// its Filter refused it (the last victim's slice released in between), so that preemption
		// now finds it free and nothing to evict, and answers "no candidate" with a cleared
		// nomination. The pod is retried (reject activated it), after its backoff since it is in
		// its cycle, while the pods of lower priority the same change woke are retried at once:
		// without its nomination, the plugin's and the framework's (res), they would take the
		// room first, and be preempted by it again (the CI failure of 2026-12-01). Both are kept
		// until the retry judges the pod on the newer state.
		res = nil
	}
	return res, st
}

// forgetIdle drops the room preemption cleared for the pod once the pod waits for nothing there
// (awaited is empty): the room is free and the pod did not take it, or another pod of higher
// priority holds it; either way holding it would only keep pods off free room. preempt asks only
// when no room was freed since the pod's cycle began: a room freed during the cycle is not one
// the pod failed to take.
func (pr *preemptor) forgetIdle(pod *corev1.Pod) {
	n, ok := pr.held.get(pod.UID)
	if !ok || n.kind != byPreemption || pr.handle == nil {
		return
	}
	if len(pr.awaited(pod, n.node)) == 0 {
		pr.held.forget(pod.UID, n.node)
	}
}

// forget drops what a dry run planned for a pod that is gone.
func (pr *preemptor) forget(uid types.UID) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	delete(pr.dryRun, uid)
}

// GetOffsetAndNumCandidates implements preemption.Interface: DefaultPreemption's number of
// candidates, from the first node (deterministic).
func (pr *preemptor) GetOffsetAndNumCandidates(n int32) (int32, int32) {
	c := max(n*minCandidateNodesPercentage/100, minCandidateNodesAbsolute)
	return 0, min(c, n)
}

// CandidatesToVictimsMap implements preemption.Interface.
func (pr *preemptor) CandidatesToVictimsMap(candidates []preemption.Candidate) map[string]*extenderv1.Victims {
	m := make(map[string]*extenderv1.Victims, len(candidates))
	for _, c := range candidates {
		m[c.Name()] = c.Victims()
	}
	return m
}

// OrderedScoreFuncs implements preemption.Interface: among candidate nodes, the fewest PDB
// violations, then the fewest victims, then the lowest highest priority, then the lowest sum
// of priorities (the order mig.VictimChoice.Less uses on one node).
func (pr *preemptor) OrderedScoreFuncs(_ context.Context, m map[string]*extenderv1.Victims) []func(string) int64 {
	return []func(string) int64{
		func(n string) int64 { return -m[n].NumPDBViolations },
		func(n string) int64 { return -int64(len(m[n].Pods)) },
		func(n string) int64 {
			top := int64(-1 << 40)
			for _, v := range m[n].Pods {
				top = max(top, int64(corev1helpers.PodPriority(v)))
			}
			return -top
		},
		func(n string) int64 {
			var sum int64
			for _, v := range m[n].Pods {
				sum += int64(corev1helpers.PodPriority(v))
			}
			return -sum
		},
	}
}

// PodEligibleToPreemptOthers implements preemption.Interface as DefaultPreemption does
// (preemptionPolicy: Never never preempts; a pod whose nominated node still has victims
// terminating waits for them), and also waits while slices of that node it needs are still
// being released (a victim's pod is gone before the agent has destroyed its slice).
func (pr *preemptor) PodEligibleToPreemptOthers(_ context.Context, pod *corev1.Pod, nominatedNodeStatus *fwk.Status) (bool, string) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return false, "not eligible: the pod's preemptionPolicy is Never"
	}
	node := pod.Status.NominatedNodeName
	if node == "" || nominatedNodeStatus.Code() == fwk.UnschedulableAndUnresolvable {
		return true, ""
	}
	if waits := pr.awaited(pod, node); len(waits) > 0 {
		if len(waits) > maxWaits {
			waits = append(waits[:maxWaits], fmt.Sprintf("%d more", len(waits)-maxWaits))
		}
		return false, fmt.Sprintf("waiting on node %s for %s", node, strings.Join(waits, ", "))
	}
	return true, ""
}

// awaited lists what a pod nominated to node waits for, in words for its tenant (podFor):
// lower-priority pods terminating by
// preemption there, slices being released that overlap the placement cleared for it (any slice
// being released on the node when none is recorded), slices whose pod is already gone while
// their allocation is not yet being deleted (the garbage collector deletes it after the pod,
// seconds later on a busy cluster), and slices there that the agent still reports once their
// allocation is gone. Preempting again in any of these windows would evict more pods for room
// that is about to free.
func (pr *preemptor) awaited(pod *corev1.Pod, node string) []string {
	prio := corev1helpers.PodPriority(pod)
	var waits []string
	present := map[types.UID]bool{}
	if ni, err := pr.handle.SnapshotSharedLister().NodeInfos().Get(node); err == nil && ni != nil {
		for _, pi := range ni.GetPods() {
			q := pi.GetPod()
			present[q.UID] = true
			if corev1helpers.PodPriority(q) < prio && terminatingByPreemption(q) {
				waits = append(waits, podFor(pod.Namespace, q.Namespace+"/"+q.Name)+" to terminate")
			}
		}
	}
	mine := pr.held.slots(pod.UID, node)
	for _, claims := range pr.cache.Claims(node) {
		for _, c := range claims {
			concerns := mine == nil || overlapsAny(c.Slot, mine)
			switch {
			case c.Leaving && concerns:
				waits = append(waits, fmt.Sprintf("the slice %s of %s to be released", c.Slot, podFor(pod.Namespace, c.Pod)))
			case c.Allocated && c.PodUID != pod.UID && !present[c.PodUID] && concerns:
				waits = append(waits, fmt.Sprintf("the slice %s of %s (deleted) to be released", c.Slot, podFor(pod.Namespace, c.Pod)))
			case c.PodUID == "" && mine != nil && overlapsAny(c.Slot, mine):
				// Unlike the two cases above, no "any such slice on the node" when no cleared
				// placement is recorded (mine == nil, after a scheduler restart): a slice being
				// released, or whose pod is gone, is certain to free (the agent is releasing it;
				// the garbage collector deletes the allocation of a deleted pod), so waiting for
				// it ends. A slice the agent reports with no allocation is not: it may be an
				// instance no allocation ever held, which the agent keeps out of the way and
				// nobody destroys (docs/design/invariants.md, N10), and waiting for every such
				// slice of the node would hold the pod there for good. It is awaited only where
				// it overlaps the placement preemption cleared: there it was a victim's slice
				// whose allocation is already gone, and it is about to be destroyed.
				waits = append(waits, fmt.Sprintf("the slice %s the node's agent still reports to be destroyed", c.Slot))
			}
		}
	}
	sort.Strings(waits)
	return waits
}

// terminatingByPreemption reports whether the pod is being deleted because a scheduler
// preempted it (what k8s.io/kubernetes/pkg/scheduler/framework/preemption's
// PodTerminatingByPreemption answers since 1.37; older minors lack it).
func terminatingByPreemption(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler
		}
	}
	return false
}

func overlapsAny(s snapshot.Slot, slots []snapshot.Slot) bool {
	for _, o := range slots {
		if s.Overlaps(o.Slot) {
			return true
		}
	}
	return false
}

// dryPlan is what a dry run planned for the pod on one node.
type dryPlan struct {
	slots   []snapshot.Slot
	victims []string // namespace/name
}

// putDryRun keeps the plan for the pod on a node during a dry run; keepDryRun makes the chosen
// node's slots the pod's nomination, forgets the others and returns the chosen plan.
func (pr *preemptor) putDryRun(uid types.UID, node string, plan dryPlan) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.dryRun == nil {
		pr.dryRun = map[types.UID]map[string]dryPlan{}
	}
	if pr.dryRun[uid] == nil {
		pr.dryRun[uid] = map[string]dryPlan{}
	}
	pr.dryRun[uid][node] = plan
}

func (pr *preemptor) keepDryRun(pod *corev1.Pod, node string) dryPlan {
	pr.mu.Lock()
	plan := pr.dryRun[pod.UID][node]
	delete(pr.dryRun, pod.UID)
	pr.mu.Unlock()
	if node != "" && plan.slots != nil {
		pr.held.set(pod, node, plan.slots, byPreemption, time.Time{})
	}
	return plan
}
