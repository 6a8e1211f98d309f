package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Filter reasons (fixed strings: the scheduler counts nodes per reason).
const (
	reasonNoAccelerator  = "node has no NodeAccelerator (no Slicer agent)"
	reasonForeignManager = "MIG on the node is managed by NVIDIA's MIG manager"
	reasonPinned         = "the pod's slices are already allocated on another node"
)

// Filter answers from the snapshot, as the cycle state's overlay changes it (overlay.go): no
// API call, and no allocation unless the framework simulates pods on the node.
func (p *Plugin) Filter(_ context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, err := readState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	if s.adoptedNode != "" && node.Name != s.adoptedNode {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonPinned)
	}
	if s.whole > 0 {
		return p.filterWhole(cs, pod, s, nodeInfo)
	}
	if _, ok := node.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]; ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonForeignManager)
	}
	n := p.cache.Node(node.Name)
	if n == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasonNoAccelerator)
	}
	if s.req == nil {
		return nil
	}
	if n.Reason != "" {
		return fwk.NewStatus(fwk.Unschedulable, n.Reason)
	}
	if why := driverLacks(n, s); why != "" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why) // no eviction gives the driver the profile
	}
	if _, ok := mig.Score(p.nodeView(cs, n, pod), s.req); !ok {
		return fwk.NewStatus(fwk.Unschedulable, s.noRoom)
	}
	return nil
}

// driverLacks is why the node's driver cannot create one of the slices the pod still needs
// (snapshot.Node.Lacks, decided when the node's NodeAccelerator changes), "" when it can.
func driverLacks(n *snapshot.Node, s *podState) string {
	if n.Lacks == nil {
		return ""
	}
	for _, i := range s.missing {
		if why, ok := n.Lacks[s.slices[i]]; ok {
			return why
		}
	}
	return ""
}
