package agent

import (
	corev1 "k8s.io/api/core/v1"
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
// reason), and forgets the pods whose slice is healthy again or gone. The kubelet learns it
// from ListAndWatch (the device's health); the Event tells the pod's owner.
func (r *Reconciler) tellUnhealthy(w world, obs *engine.Observation, o outcome) {
	seen := map[types.UID]bool{}
	for k, s := range o.Bound {
		a := w.Allocs[k]
		if a == nil {
			continue
		}
		seen[a.UID] = true
		why := unhealthyReason(obs, s)
		if why == "" {
			delete(r.noted, a.UID)
			continue
		}
		if r.noted[a.UID] == why {
			continue
		}
		r.noted[a.UID] = why
		if r.recorder == nil {
			continue
		}
		pod := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: a.Namespace, Name: a.Spec.PodName, UID: types.UID(a.Spec.PodUID)}
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, slicerv1alpha1.ReasonGPUUnhealthy, "Reconcile",
			"MIG device %s (%s) of this pod is unhealthy: %s; the kubelet is told, and no new pod is placed on it", s.MIGUUID, s.Slot, why)
	}
	for uid := range r.noted {
		if !seen[uid] {
			delete(r.noted, uid)
		}
	}
}
