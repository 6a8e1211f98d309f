package plugin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// defragmentWhole is defragment for a pod asking for whole GPUs (docs/design/whole-gpus.md,
// "Defragmentation"): mig.PlanWholeDefrag finds the fewest moves of movable slices that empty
// the GPUs it needs on one Slicer node, within the PodDisruptionBudgets (planWithin); the plan
// is reported as for slices and, in Evict mode, carried out the same way: every moved slice's
// room held, the emptied GPUs held for the pod, the plan recorded on the pod, then the
// evictions. Its answers are not memoized (the memo is keyed by slice requests).
func (d *defragmenter) defragmentWhole(ctx context.Context, pod *corev1.Pod, s *podState) (*fwk.PostFilterResult, string) {
	if d.policy.mode == slicerv1alpha1.DefragmentationDisabled || len(s.missing) == 0 || len(s.missing) != s.whole {
		return nil, ""
	}
	if words := d.evictor.waitingPlan(pod); words != "" {
		return nil, words
	}
	start := time.Now()
	nodes := d.cache.Nodes()
	n := len(s.missing)
	res, movable, _, err := d.planWithin(nodes, s, func(in []mig.Node, m *movableIndex) mig.DefragResult {
		for i, sn := range nodes {
			if sn.Blocked != "" {
				in[i] = mig.Node{} // neither emptied nor a destination
			}
		}
		return mig.PlanWholeDefrag(in, n, m.at, mig.DefragOptions{MaxMoves: d.policy.maxMoves, Destinations: m.destinations})
	})
	defer d.release(movable)
	if words := d.answered(pod, start, res, err); words != "" {
		return nil, words
	}
	if res.Outcome != mig.DefragPlanned {
		if res.Outcome == mig.DefragNoPlan {
			return nil, fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods that empties %d GPU(s) of one node", d.policy.maxMoves, n)
		}
		return nil, ""
	}
	target := nodes[res.Plan.Target.Node]
	slots := make([]snapshot.Slot, len(res.Plan.WholeGPUs))
	for k, g := range res.Plan.WholeGPUs {
		slots[k] = snapshot.Slot{Slot: mig.WholeSlot(target.GPUs[g].UUID), Index: s.missing[k]}
	}
	return d.announce(ctx, pod, nodes, res.Plan, movable, slots)
}
