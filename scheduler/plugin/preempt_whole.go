package plugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// selectWholeVictims is selectVictims for a pod of whole GPUs on a Slicer node: the fewest pods
// of lower priority whose eviction empties as many GPUs as the pod still needs
// (mig.ChooseWholeVictims; as few pods a PodDisruptionBudget protects as any choice evicts), then, when the pod still does not fit (it needs more than GPUs), the other pods as
// DefaultPreemption removes them. A node Slicer does not manage is DefaultPreemption's, which
// runs after this plugin's PostFilter.
func (pr *preemptor) selectWholeVictims(ctx context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo,
	possible []fwk.PodInfo, pdbs []*policyv1.PodDisruptionBudget, s *podState) ([]*corev1.Pod, int, *fwk.Status) {
	name := nodeInfo.Node().Name
	n := pr.cache.Node(name)
	switch {
	case len(s.missing) == 0:
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "the pod needs no new whole GPU")
	case foreignNode(nodeInfo.Node(), n):
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "whole GPUs of a node Slicer does not manage are counted, not placed")
	case n.Blocked != "":
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, n.Blocked)
	}
	prio := corev1helpers.PodPriority(pod)
	cands := map[types.UID]fwk.PodInfo{}
	protected := map[types.UID]bool{}
	for _, pi := range possible {
		if q := pi.GetPod(); corev1helpers.PodPriority(q) < prio && q.UID != pod.UID {
			cands[q.UID] = pi
			protected[q.UID] = pdbProtects(q, pdbs)
		}
	}
	// A budget never makes preemption impossible, as upstream: the choice evicts the fewest
	// protected pods it can, victim by victim (mig.WholeVictimChoice.Less).
	choice, ok := mig.ChooseWholeVictims(wholeVictimGPUs(n, pr.cache.Claims(name), cands, protected, prio), len(s.missing), prio)
	if !ok {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("no %d GPUs of node %s can be emptied of pods of lower priority", len(s.missing), name))
	}
	slots := make([]snapshot.Slot, len(choice.GPUs))
	for k, g := range choice.GPUs {
		slots[k] = snapshot.Slot{Slot: mig.WholeSlot(n.GPUs[g].UUID), Index: s.missing[k]}
	}
	return pr.evict(ctx, cs, pod, nodeInfo, cands, pdbs, choice.Owners, slots)
}

// wholeVictimGPUs is the node's GPUs as whole-GPU preemption sees them: whether each serves
// whole once empty (mig.GPU.WholeOnceEmpty) and who holds it, from its claims; a claim of a pod
// that is no candidate is pinned, one of a pod a budget protects is marked so.
func wholeVictimGPUs(n *snapshot.Node, claims map[string][]snapshot.Claim, cands map[types.UID]fwk.PodInfo, protected map[types.UID]bool, prio int32) []mig.WholeVictimGPU {
	gpus := make([]mig.WholeVictimGPU, len(n.GPUs))
	for i, g := range n.GPUs {
		gpus[i].Whole, gpus[i].Switch = n.MIG.GPUs[i].WholeOnceEmpty()
		for _, c := range claims[g.UUID] {
			h := holderOf(c, cands, nil, prio)
			h.Protected = !h.Pinned && protected[c.PodUID]
			gpus[i].Holders = append(gpus[i].Holders, h)
		}
	}
	return gpus
}
