package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// selectVictims is SelectVictimsOnNode for every minor: possible are the pods of the node the
// framework offers as victims. The node's slices are planned by mig.PlanPreemption (pods
// covered by a PodDisruptionBudget that allows no disruption are spared when a plan without
// them exists); those victims are removed from nodeInfo and the cycle state, then, when the
// pod still does not fit (it needs more than slices), the other lower-priority pods are
// removed and given back one by one as DefaultPreemption does, the most important first.
func (pr *preemptor) selectVictims(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	possible []fwk.PodInfo, pdbs []*policyv1.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	s, err := readState(cs)
	if err == nil && s.whole > 0 {
		return pr.selectWholeVictims(ctx, cs, pod, nodeInfo, possible, pdbs, s)
	}
	if err != nil || s.req == nil {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod needs no new slice")
	}
	name := nodeInfo.Node().Name
	n := pr.cache.Node(name)
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
	plan, ok, err := pr.planSparing(n, pr.cache.Claims(name), cands, s.req, prio, pdbs)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	if !ok {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			"no GPU placement for "+describe(s.slices)+" can be cleared of pods of lower priority")
	}
	var slots []snapshot.Slot
	for _, a := range plan.Assignments {
		slots = append(slots, snapshot.Slot{Slot: mig.Slot{GPU: n.GPUs[a.GPU].UUID, Profile: a.Profile.Name, Placement: a.Placement},
			Index: s.missing[a.Slice]})
	}
	return pr.evict(ctx, cs, pod, nodeInfo, cands, pdbs, plan.Owners, slots)
}

// evict removes the chosen owners' pods (of cands) from nodeInfo and the cycle state; then, when
// the pod still does not fit (it needs more than GPUs), the other candidates as DefaultPreemption
// removes them (moreVictims). It keeps the dry run's plan (the slots cleared, the victims) for the
// pod on the node and returns the victims and their budget violations.
func (pr *preemptor) evict(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo, cands map[types.UID]fwk.PodInfo,
	pdbs []*policyv1.PodDisruptionBudget, owners []string, slots []snapshot.Slot) ([]*corev1.Pod, int, *fwk.Status) {
	name := nodeInfo.Node().Name
	logger := klog.FromContext(ctx)
	remove := func(pi fwk.PodInfo) *fwk.Status {
		if err := nodeInfo.RemovePod(logger, pi.GetPod()); err != nil {
			return fwk.AsStatus(err)
		}
		return pr.handle.RunPreFilterExtensionRemovePod(ctx, cs, pod, pi, nodeInfo)
	}
	var victims []fwk.PodInfo
	chosen := map[types.UID]bool{}
	for _, o := range owners {
		pi := cands[types.UID(o)]
		victims = append(victims, pi)
		chosen[pi.GetPod().UID] = true
		if st := remove(pi); !st.IsSuccess() {
			return nil, 0, st
		}
	}
	if st := pr.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
		more, st := pr.moreVictims(ctx, cs, pod, nodeInfo, cands, chosen, pdbs, remove)
		if !st.IsSuccess() {
			return nil, 0, st
		}
		victims = append(victims, more...)
	}
	if len(victims) == 0 {
		return nil, 0, fwk.NewStatus(fwk.Unschedulable, "room on node "+name+" frees once slices being released are gone")
	}
	pods := make([]*corev1.Pod, 0, len(victims))
	names := make([]string, 0, len(victims))
	for _, v := range victims {
		pods = append(pods, v.GetPod())
		names = append(names, v.GetPod().Namespace+"/"+v.GetPod().Name)
	}
	pr.putDryRun(pod.UID, name, dryPlan{slots: slots, victims: names})
	return pods, pdbViolations(pods, pdbs), nil
}

// planSparing plans the node's slices sparing the pods whose deletion would violate a
// PodDisruptionBudget where another plan exists, as DefaultPreemption spares them pod by pod
// (budgets.go): first no pod a budget protects on its own; then, while the victims together take
// a budget below what it allows (pdbViolating, in DefaultPreemption's order of importance, so the
// least important victims are the violating ones), those too. Of the plans found, the one with
// the fewest violations wins (then the first); without one that spares, the plan that spares
// nobody: a budget never makes preemption impossible, as upstream.
func (pr *preemptor) planSparing(n *snapshot.Node, claims map[string][]snapshot.Claim, cands map[types.UID]fwk.PodInfo,
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
		plan, ok, err := pr.planOn(n, claims, cands, req, prio, spared)
		if err != nil || !ok {
			if err != nil || found {
				return best, found, err
			}
			return pr.planOn(n, claims, cands, req, prio, nil)
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
func (pr *preemptor) planOn(n *snapshot.Node, claims map[string][]snapshot.Claim, cands map[types.UID]fwk.PodInfo,
	req *mig.Request, prio int32, spared map[types.UID]bool) (mig.PreemptionPlan, bool, error) {
	gpus := make([]mig.VictimGPU, len(n.GPUs))
	for i, g := range n.GPUs {
		// g.Usable: the GPU takes slices (in MIG mode); a whole or switching GPU hosts no victim.
		gpus[i] = mig.VictimGPU{Model: g.Model, Usable: g.Usable && g.Model.Valid()}
		for _, c := range claims[g.UUID] {
			if c.Slot.Whole() {
				continue // a GPU held whole is not in MIG mode: no slice victim (g.Usable is false)
			}
			gpus[i].Holders = append(gpus[i].Holders, holderOf(c, cands, spared, prio))
		}
	}
	return mig.PlanPreemption(gpus, req, prio)
}

// holderOf is claim c as preemption sees it: its owner, at its pod's priority when the pod is a
// candidate and not spared, else pinned (at the preemptor's priority prio).
func holderOf(c snapshot.Claim, cands map[types.UID]fwk.PodInfo, spared map[types.UID]bool, prio int32) mig.Holder {
	h := mig.Holder{Instance: mig.Instance{Profile: c.Slot.Profile, Placement: c.Slot.Placement},
		Owner: string(c.PodUID), Leaving: c.Leaving, Pinned: true, Priority: prio}
	if pi, ok := cands[c.PodUID]; ok && c.PodUID != "" {
		h.Pinned = spared[c.PodUID]
		h.Priority = corev1helpers.PodPriority(pi.GetPod())
	}
	return h
}

// moreVictims is DefaultPreemption's way for what slices alone do not free: every other
// candidate removed, then given back one by one as long as the pod still fits, the violating ones
// first (those whose deletion, after the slice victims', would take a budget below what it
// allows: pdbViolating), each group the most important first.
func (pr *preemptor) moreVictims(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
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
	if st := pr.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
		return nil, st
	}
	var more []fwk.PodInfo
	for _, pi := range others {
		nodeInfo.AddPodInfo(pi)
		if st := pr.handle.RunPreFilterExtensionAddPod(ctx, cs, pod, pi, nodeInfo); !st.IsSuccess() {
			return nil, st
		}
		if st := pr.handle.RunFilterPluginsWithNominatedPods(ctx, cs, pod, nodeInfo); !st.IsSuccess() {
			if st := remove(pi); !st.IsSuccess() {
				return nil, st
			}
			more = append(more, pi)
		}
	}
	return more, nil
}
