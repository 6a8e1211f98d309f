package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/slicer-operator/slicer/internal/mig"
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

// preemptor implements preemption.Interface for the plugin.
type preemptor struct{ p *Plugin }

var _ preemption.Interface = &preemptor{}

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
	if waits := pr.p.awaited(pod, node); len(waits) > 0 {
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
func (p *Plugin) awaited(pod *corev1.Pod, node string) []string {
	prio := corev1helpers.PodPriority(pod)
	var waits []string
	present := map[types.UID]bool{}
	if ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(node); err == nil && ni != nil {
		for _, pi := range ni.GetPods() {
			q := pi.GetPod()
			present[q.UID] = true
			if corev1helpers.PodPriority(q) < prio && terminatingByPreemption(q) {
				waits = append(waits, podFor(pod.Namespace, q.Namespace+"/"+q.Name)+" to terminate")
			}
		}
	}
	mine := p.held.slots(pod.UID, node)
	for _, claims := range p.cache.Claims(node) {
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

// selectVictims is SelectVictimsOnNode for every minor: possible are the pods of the node the
// framework offers as victims. The node's slices are planned by mig.PlanPreemption (pods
// covered by a PodDisruptionBudget that allows no disruption are spared when a plan without
// them exists); those victims are removed from nodeInfo and the cycle state, then, when the
// pod still does not fit (it needs more than slices), the other lower-priority pods are
// removed and given back one by one as DefaultPreemption does, the most important first.
func (p *Plugin) selectVictims(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	possible []fwk.PodInfo, pdbs []*policyv1.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	s, err := readState(cs)
	if err != nil || s.req == nil {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod needs no new slice")
	}
	name := nodeInfo.Node().Name
	n := p.cache.Node(name)
	switch {
	case n == nil:
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNoAccelerator)
	case n.Reason != "":
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, n.Reason)
	}
	prio := corev1helpers.PodPriority(pod)
	cands := map[types.UID]fwk.PodInfo{}
	for _, pi := range possible {
		if q := pi.GetPod(); corev1helpers.PodPriority(q) < prio && q.UID != pod.UID {
			cands[q.UID] = pi
		}
	}
	plan, ok, err := p.planSparing(n, p.cache.Claims(name), cands, s.req, prio, pdbs)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	if !ok {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			"no GPU placement for "+describe(s.slices)+" can be cleared of pods of lower priority")
	}
	logger := klog.FromContext(ctx)
	remove := func(pi fwk.PodInfo) *fwk.Status {
		if err := nodeInfo.RemovePod(logger, pi.GetPod()); err != nil {
			return fwk.AsStatus(err)
		}
		return p.handle.RunPreFilterExtensionRemovePod(ctx, cs, pod, pi, nodeInfo)
	}
	var victims []fwk.PodInfo
	chosen := map[types.UID]bool{}
	for _, o := range plan.Owners {
		pi := cands[types.UID(o)]
		victims = append(victims, pi)
		chosen[pi.GetPod().UID] = true
		if st := remove(pi); !st.IsSuccess() {
			return nil, 0, st
		}
	}
	if st := p.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
		more, st := p.moreVictims(ctx, cs, pod, nodeInfo, cands, chosen, pdbs, remove)
		if !st.IsSuccess() {
			return nil, 0, st
		}
		victims = append(victims, more...)
	}
	if len(victims) == 0 {
		return nil, 0, fwk.NewStatus(fwk.Unschedulable, "room on node "+name+" frees once slices being released are gone")
	}
	var slots []snapshot.Slot
	for _, a := range plan.Assignments {
		slots = append(slots, snapshot.Slot{Slot: mig.Slot{GPU: n.GPUs[a.GPU].UUID, Profile: a.Profile.Name, Placement: a.Placement},
			Index: s.missing[a.Slice]})
	}
	pods := make([]*corev1.Pod, 0, len(victims))
	names := make([]string, 0, len(victims))
	for _, v := range victims {
		pods = append(pods, v.GetPod())
		names = append(names, v.GetPod().Namespace+"/"+v.GetPod().Name)
	}
	p.putDryRun(pod.UID, name, dryPlan{slots: slots, victims: names})
	return pods, pdbViolations(pods, pdbs), nil
}

// planSparing plans the node's slices sparing the pods whose deletion would violate a
// PodDisruptionBudget where another plan exists, as DefaultPreemption spares them pod by pod
// (budgets.go): first no pod a budget protects on its own; then, while the victims together take
// a budget below what it allows (pdbViolating, in DefaultPreemption's order of importance, so the
// least important victims are the violating ones), those too. Of the plans found, the one with
// the fewest violations wins (then the first); without one that spares, the plan that spares
// nobody: a budget never makes preemption impossible, as upstream.
func (p *Plugin) planSparing(n *snapshot.Node, claims map[string][]snapshot.Claim, cands map[types.UID]fwk.PodInfo,
	req *mig.Request, prio int32, pdbs []*policyv1.PodDisruptionBudget) (mig.PreemptionPlan, bool, error) {
	spared := map[types.UID]bool{}
	for uid, pi := range cands {
		if pdbProtects(pi.GetPod(), pdbs) {
			spared[uid] = true
		}
	}
	var best mig.PreemptionPlan
	found, fewest := false, 0
	for {
		plan, ok, err := p.planOn(n, claims, cands, req, prio, spared)
		if err != nil || !ok {
			if err != nil || found {
				return best, found, err
			}
			return p.planOn(n, claims, cands, req, prio, nil)
		}
		victims := make([]*corev1.Pod, 0, len(plan.Owners))
		for _, o := range plan.Owners {
			victims = append(victims, cands[types.UID(o)].GetPod())
		}
		byImportance(victims)
		violating := pdbViolating(victims, pdbs)
		count, more := 0, false
		for i, v := range victims {
			if violating[i] {
				count++
				more = more || !spared[v.UID]
				spared[v.UID] = true
			}
		}
		if !found || count < fewest {
			best, found, fewest = plan, true, count
		}
		if count == 0 || !more {
			return best, true, nil
		}
	}
}

// planOn builds the node's holders from its claims and plans the request; the spared pods are
// not victims.
func (p *Plugin) planOn(n *snapshot.Node, claims map[string][]snapshot.Claim, cands map[types.UID]fwk.PodInfo,
	req *mig.Request, prio int32, spared map[types.UID]bool) (mig.PreemptionPlan, bool, error) {
	gpus := make([]mig.VictimGPU, len(n.GPUs))
	for i, g := range n.GPUs {
		gpus[i] = mig.VictimGPU{Model: g.Model, Usable: n.MIG.GPUs[i].Usable && g.Model.Valid()}
		for _, c := range claims[g.UUID] {
			h := mig.Holder{Instance: mig.Instance{Profile: c.Slot.Profile, Placement: c.Slot.Placement},
				Owner: string(c.PodUID), Leaving: c.Leaving, Pinned: true, Priority: prio}
			if pi, ok := cands[c.PodUID]; ok && c.PodUID != "" {
				h.Pinned = spared[c.PodUID]
				h.Priority = corev1helpers.PodPriority(pi.GetPod())
			}
			gpus[i].Holders = append(gpus[i].Holders, h)
		}
	}
	return mig.PlanPreemption(gpus, req, prio)
}

// moreVictims is DefaultPreemption's way for what slices alone do not free: every other
// candidate removed, then given back one by one as long as the pod still fits, the violating ones
// first (those whose deletion, after the slice victims', would take a budget below what it
// allows: pdbViolating), each group the most important first.
func (p *Plugin) moreVictims(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	cands map[types.UID]fwk.PodInfo, chosen map[types.UID]bool, pdbs []*policyv1.PodDisruptionBudget,
	remove func(fwk.PodInfo) *fwk.Status) ([]fwk.PodInfo, *fwk.Status) {
	var taken, rest []*corev1.Pod
	for uid, pi := range cands {
		if chosen[uid] {
			taken = append(taken, pi.GetPod())
		} else {
			rest = append(rest, pi.GetPod())
		}
	}
	byImportance(taken)
	byImportance(rest)
	violating := pdbViolating(append(taken, rest...), pdbs)[len(taken):]
	var others []fwk.PodInfo
	for _, first := range []bool{true, false} {
		for i, q := range rest {
			if violating[i] == first {
				others = append(others, cands[q.UID])
			}
		}
	}
	for _, pi := range others {
		if st := remove(pi); !st.IsSuccess() {
			return nil, st
		}
	}
	if st := p.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
		return nil, st
	}
	var more []fwk.PodInfo
	for _, pi := range others {
		nodeInfo.AddPodInfo(pi)
		if st := p.handle.RunPreFilterExtensionAddPod(ctx, cs, pod, pi, nodeInfo); !st.IsSuccess() {
			return nil, st
		}
		if st := p.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
			if st := remove(pi); !st.IsSuccess() {
				return nil, st
			}
			more = append(more, pi)
		}
	}
	return more, nil
}

// dryPlan is what a dry run planned for the pod on one node.
type dryPlan struct {
	slots   []snapshot.Slot
	victims []string // namespace/name
}

// putDryRun keeps the plan for the pod on a node during a dry run; keepDryRun makes the chosen
// node's slots the pod's nomination, forgets the others and returns the chosen plan.
func (p *Plugin) putDryRun(uid types.UID, node string, plan dryPlan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dryRun == nil {
		p.dryRun = map[types.UID]map[string]dryPlan{}
	}
	if p.dryRun[uid] == nil {
		p.dryRun[uid] = map[string]dryPlan{}
	}
	p.dryRun[uid][node] = plan
}

func (p *Plugin) keepDryRun(pod *corev1.Pod, node string) dryPlan {
	p.mu.Lock()
	plan := p.dryRun[pod.UID][node]
	delete(p.dryRun, pod.UID)
	p.mu.Unlock()
	if node != "" && plan.slots != nil {
		p.held.set(pod, node, plan.slots, byPreemption, time.Time{})
	}
	return plan
}
