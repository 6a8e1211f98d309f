package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Score is internal/mig's packing score of the node for the pod, in [0, 100]:
// higher for nodes where the slices cost the least future placeability; the highest on a node
// where room is held for the pod (nominations.go).
func (p *Plugin) Score(_ context.Context, cs fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := readState(cs)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if s.whole > 0 {
		return p.scoreWhole(s, pod, nodeInfo), nil
	}
	if s.req == nil {
		return mig.MaxNodeScore, nil // fwk.MaxScore since 1.36 (fwk.MaxNodeScore before): the same 100
	}
	n := p.cache.Node(nodeInfo.Node().Name)
	if n == nil {
		return 0, nil
	}
	if p.held.slots(pod.UID, n.Name) != nil {
		// Room was cleared or held for the pod here (preemption, or a defragmentation move
		// whose replacement it is): Reserve takes it there.
		return mig.MaxNodeScore, nil
	}
	score, _ := mig.Score(n.MIG, s.req)
	return score, nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are already in [0, 100].
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// PreScore skips Score for pods that ask for no slice.
func (p *Plugin) PreScore(_ context.Context, cs fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := cs.Read(stateKey); err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}
