package agent

import (
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// unhealthyReason says why the slice s bound on observation obs is unhealthy for its pod ("" if
// it is not): an XID in its instance, or its GPU's health (engine.Health). A GPU that could
// not be observed on this pass is not told to pods (that is usually one failed call, retried).
func unhealthyReason(obs *engine.Observation, s engine.Slice) string {
	if s.Unhealthy != "" {
		return s.Unhealthy
	}
	if g := obs.GPUByUUID(s.GPU); g != nil && !g.Healthy && g.Err == nil {
		return g.Unusable()
	}
	return ""
}

// tellUnhealthy records a Warning Event on each pod whose slice turned unhealthy (once per
// reason, engine.Told), and forgets the pods whose slice is healthy again or gone. The kubelet
// learns it from ListAndWatch (the device's health); the Event tells the pod's owner.
func (r *Reconciler) tellUnhealthy(w world, obs *engine.Observation, o outcome) {
	why := map[types.UID]string{}
	slice := map[types.UID]engine.Slice{}
	byUID := map[types.UID]*slicerv1alpha1.SliceAllocation{}
	for k, s := range o.Bound {
		if a := w.Allocs[k]; a != nil {
			why[a.UID], slice[a.UID], byUID[a.UID] = unhealthyReason(obs, s), s, a
		}
	}
	for _, uid := range r.noted.Pass(why) {
		a, s := byUID[uid], slice[uid]
		engine.TellPod(r.recorder, a.Namespace, a.Spec.PodName, types.UID(a.Spec.PodUID),
			"MIG device %s (%s) of this pod is unhealthy: %s; the kubelet is told, and no new pod is placed on it", s.MIGUUID, s.Slot, why[uid])
	}
}
