package dra

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Instance states in the agent's metrics (device-plugin/agent/metrics.go); in DRA mode an
// instance is allocated when a claim holds its device, orphaned otherwise.
const (
	stateAllocated = "allocated"
	stateOrphaned  = "orphaned"
)

// holder is the claim holding a device, for the slice_info labels: its namespace and the pod
// it is reserved for (empty when none).
type holder struct{ Namespace, Pod string }

// holders maps each device of pool held by an allocated claim to that claim.
func holders(claims []resourceapi.ResourceClaim, pool string) map[string]holder {
	out := map[string]holder{}
	for i := range claims {
		c := &claims[i]
		devs, err := claimDevices(c, pool)
		if err != nil {
			continue
		}
		h := holder{Namespace: c.Namespace}
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
			state, h := stateOrphaned, holder{}
			if name, ok := sliceDevice(g, s); ok {
				if hh, ok := held[name]; ok {
					state, h = stateAllocated, hh
				}
			}
			m.RecordSlice(g.Index, s, state, h.Namespace, h.Pod)
		}
		m.RecordGPU(g)
	}
}
