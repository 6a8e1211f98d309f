package agent

import (
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// recordMetrics sets the per-GPU and per-slice gauges (engine.Metrics.Record): each slice in
// the state the NodeAccelerator shows, with its allocation's namespace and pod.
func (r *Reconciler) recordMetrics(obs *engine.Observation, v engine.NodeView, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation) {
	r.opts.Metrics.Record(obs, func(_ *engine.GPU, s engine.Slice) (slicerv1alpha1.SliceState, string, string) {
		state := slicerv1alpha1.SliceOrphaned
		if st, ok := v.States[s.Key()]; ok {
			state = st
		}
		ns, pod := "", ""
		if h, ok := v.Holders[s.Key()]; ok {
			ns = h.Namespace
			if a := allocs[h]; a != nil {
				pod = a.Spec.PodName
			}
		}
		return state, ns, pod
	})
}
