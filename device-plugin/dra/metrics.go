package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Instance states in the agent's metrics (device-plugin/agent/metrics.go); in DRA mode an
// instance is allocated when a claim holds its device, orphaned otherwise.
const (
	stateAllocated = "allocated"
	stateOrphaned  = "orphaned"
)

// holder is the claim holding a device: the NodeAccelerator's claim reference, and for the
// slice_info labels its namespace and the pod it is reserved for (empty when none).
type holder struct {
	Namespace, Name, Pod string
	UID                  types.UID
}

// holders maps each device of pool held by an allocated claim to that claim.
func holders(claims []*resourceapi.ResourceClaim, pool string) map[string]holder {
	out := map[string]holder{}
	for _, c := range claims {
		devs, err := claimDevices(c, pool)
		if err != nil {
			continue
		}
		h := holder{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.APIGroup == "" {
				h.Pod = r.Name
				break
			}
		}
		for _, d := range devs {
			out[d.Device] = h
		}
	}
	return out
}

// holderOf is the claim holding observed slice s of GPU g, and the slice's device name.
func holderOf(held map[string]holder, g *agent.GPU, s agent.Slice) (holder, string, bool) {
	name, ok := sliceDevice(g, s)
	if !ok {
		return holder{}, "", false
	}
	h, ok := held[name]
	return h, name, ok
}

// claimView is the NodeAccelerator's view of the node (agent.StatusWriter): each instance
// whose device an allocated claim holds is that claim's, as metrics count it allocated.
func claimView(held map[string]holder) func(*agent.GPU, agent.Slice) (slicerv1alpha1.ClaimReference, bool) {
	return func(g *agent.GPU, s agent.Slice) (slicerv1alpha1.ClaimReference, bool) {
		h, name, ok := holderOf(held, g, s)
		if !ok {
			return slicerv1alpha1.ClaimReference{}, false
		}
		return slicerv1alpha1.ClaimReference{Namespace: h.Namespace, Name: h.Name, UID: string(h.UID), Device: name}, true
	}
}

// recordMetrics sets the agent's per-GPU and per-slice gauges from an observation, with the
// device-plugin frontend's recording (agent.Metrics): an instance whose device an allocated
// claim holds is allocated, any other orphaned.
func recordMetrics(m *agent.Metrics, obs *agent.Observation, held map[string]holder) {
	m.ResetGPUs()
	for _, g := range obs.GPUs {
		if !g.Model.Valid() || g.MIGMode != nvml.MIGEnabled {
			continue
		}
		for _, s := range g.Slices {
			state := stateOrphaned
			h, _, ok := holderOf(held, g, s)
			if ok {
				state = stateAllocated
			}
			m.RecordSlice(g.Index, s, state, h.Namespace, h.Pod)
		}
		m.RecordGPU(g)
	}
}
