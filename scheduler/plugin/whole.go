package plugin

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Whole-GPU requests (nvidia.com/gpu: N, podrequest.WholeGPUs) on two kinds of node
// (docs/design/whole-gpus.md, "The scheduler"):
//
//   - a Slicer node (one with a NodeAccelerator): internal/mig decides, from the snapshot, which
//     N GPUs of the node are free whole or empty and switchable (mig.ScoreWhole, mig.PlaceWhole),
//     and PreBind commits one allocation per GPU (spec.wholeGPU), as for slices;
//   - any other node (NVIDIA's device plugin serves nvidia.com/gpu there, or no GPU at all): the
//     node's allocatable nvidia.com/gpu less what its pods request, as NodeResourcesFit counts
//     it, scored on the same scale (mig.ScoreWholeCount); nothing is reserved or written.
//
// A node that NVIDIA's MIG manager configures (LabelNVIDIAMIGConfig) is such another node for
// whole GPUs: its device plugin serves them.

// Filter reasons for whole-GPU requests (fixed strings: the scheduler counts nodes per reason).
const (
	reasonNoWholeGPU = "node has not enough free nvidia.com/gpu"
)

// wholeRequest reads the pod's whole-GPU request: how many whole GPUs, 0 for none.
func wholeRequest(pod *corev1.Pod) (int, error) {
	if !podrequest.MentionsWholeGPUs(&pod.Spec) {
		return 0, nil
	}
	return podrequest.WholeGPUs(&pod.Spec)
}

// preFilterWhole fills s for a pod of n whole GPUs; existing are its allocations (after a
// scheduler restart between PreBind and Bind), which pin it to their node.
func preFilterWhole(s *podState, n int, existing []*snapshot.Allocation) *fwk.Status {
	s.whole = n
	have, st := adoptAllocations(s, existing, func(sl snapshot.Slot) bool { return sl.Whole() && int(sl.Index) < n },
		fmt.Sprintf("%d whole GPUs", n))
	if st != nil {
		return st
	}
	for i := range int32(n) {
		if !have[i] {
			s.missing = append(s.missing, i)
		}
	}
	s.noRoom = fmt.Sprintf("no %d free or switchable whole GPUs", len(s.missing))
	return nil
}

// foreignNode reports whether whole GPUs on node are counted, not placed: the node has no
// NodeAccelerator, or NVIDIA's MIG manager configures it.
func foreignNode(node *corev1.Node, n *snapshot.Node) bool {
	_, nvidiaManaged := node.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	return n == nil || nvidiaManaged
}

// freeForeignGPUs is how many nvidia.com/gpu the node has and has free: its allocatable less what
// its pods request, as NodeResourcesFit counts them.
func freeForeignGPUs(nodeInfo fwk.NodeInfo) (gpus, free int) {
	alloc := nodeInfo.GetAllocatable().GetScalarResources()[podrequest.WholeGPUResource]
	used := nodeInfo.GetRequested().GetScalarResources()[podrequest.WholeGPUResource]
	return int(alloc), int(max(alloc-used, 0))
}

// filterWhole is Filter for a whole-GPU pod.
func (p *Plugin) filterWhole(cs fwk.CycleState, pod *corev1.Pod, s *podState, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	n := p.cache.Node(node.Name)
	if foreignNode(node, n) {
		if _, free := freeForeignGPUs(nodeInfo); free < len(s.missing) {
			return fwk.NewStatus(fwk.Unschedulable, reasonNoWholeGPU)
		}
		return nil
	}
	if len(s.missing) == 0 {
		return nil
	}
	if n.Blocked != "" {
		return fwk.NewStatus(fwk.Unschedulable, n.Blocked)
	}
	if _, ok := mig.ScoreWhole(p.nodeView(cs, n, pod), len(s.missing)); !ok {
		return fwk.NewStatus(fwk.Unschedulable, s.noRoom)
	}
	return nil
}

// scoreWhole is Score for a whole-GPU pod.
func (p *Plugin) scoreWhole(s *podState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) int64 {
	node := nodeInfo.Node()
	n := p.cache.Node(node.Name)
	if foreignNode(node, n) {
		gpus, free := freeForeignGPUs(nodeInfo)
		score, _ := mig.ScoreWholeCount(gpus, free, len(s.missing))
		return score
	}
	if len(s.missing) == 0 || p.held.slots(pod.UID, n.Name) != nil {
		return mig.MaxNodeScore
	}
	score, _ := mig.ScoreWhole(n.MIG, len(s.missing))
	return score
}

// placeWhole chooses the GPUs of the pod's missing whole GPUs on the node (on reserveView, as
// place does for slices); none on a node Slicer does not manage.
func (p *Plugin) placeWhole(pod *corev1.Pod, nodeName string, s *podState) ([]snapshot.Slot, error) {
	n := p.cache.Node(nodeName)
	if len(s.missing) == 0 || n == nil || p.nvidiaManaged(nodeName) {
		return nil, nil
	}
	choice, err := mig.PlaceWhole(p.reserveView(pod, n), len(s.missing))
	if err != nil {
		return nil, err
	}
	slots := make([]snapshot.Slot, len(choice.GPUs))
	for k, g := range choice.GPUs {
		slots[k] = snapshot.Slot{Slot: mig.WholeSlot(n.GPUs[g].UUID), Index: s.missing[k]}
	}
	return slots, nil
}

// nvidiaManaged reports whether NVIDIA's MIG manager configures the node (foreignNode), by the
// framework's snapshot; false without a framework handle (unit tests).
func (p *Plugin) nvidiaManaged(nodeName string) bool {
	if p.handle == nil {
		return false
	}
	ni, err := p.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil || ni.Node() == nil {
		return false
	}
	_, ok := ni.Node().Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	return ok
}

// explainWhole says why the pod's whole GPUs fit no Slicer node: the node closest to fitting
// (the most GPUs free or switchable) and what holds its other GPUs (mig.ExplainWhole). Nodes
// Slicer does not manage are left to NodeResourcesFit's own reason.
func (p *Plugin) explainWhole(s *podState) string {
	var best *snapshot.Node
	bestFree := -1
	for _, n := range p.cache.Nodes() {
		if (s.adoptedNode != "" && n.Name != s.adoptedNode) || n.Blocked != "" {
			continue
		}
		free := 0
		for _, g := range n.MIG.GPUs {
			if g.WholeUse() != mig.UseNo {
				free++
			}
		}
		if free > bestFree {
			best, bestFree = n, free
		}
	}
	if best == nil {
		return fmt.Sprintf("%s: no Slicer node takes whole GPUs", s.noRoom)
	}
	return fmt.Sprintf("%s on any node: closest is node %s, where %s", s.noRoom, best.Name, mig.ExplainWhole(best.MIG, len(s.missing)))
}

// placeAddedWhole is placeAdded for a pod of n whole GPUs: on a Slicer node, the GPUs the core
// would choose now, or the node blocked when they do not fit; nothing on another node (the
// framework counts its nvidia.com/gpu itself).
func (p *Plugin) placeAddedWhole(ov *nodeOverlay, node string, n int) addedPod {
	sn := p.cache.Node(node)
	if sn == nil {
		return addedPod{}
	}
	choice, err := mig.PlaceWhole(p.applyOverlay(sn, ov), n)
	if err != nil {
		return addedPod{block: true}
	}
	out := addedPod{}
	for i, g := range choice.GPUs {
		out.slots = append(out.slots, snapshot.Slot{Slot: mig.WholeSlot(sn.GPUs[g].UUID), Index: int32(i)})
	}
	return out
}
