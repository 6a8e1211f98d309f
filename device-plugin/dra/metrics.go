package dra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
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

// recordMetrics sets the agent's per-GPU and per-slice gauges from an observation, as the
// device-plugin frontend does (the vectors are reset, so gone slices and GPUs lose their
// series).
func recordMetrics(m *agent.Metrics, obs *agent.Observation, held map[string]holder) {
	for _, v := range []interface{ Reset() }{m.Instances, m.SliceInfo, m.FreeCompute, m.FreeMemory, m.ComputeSlices, m.MemorySlices, m.Fragmentation} {
		v.Reset()
	}
	for _, g := range obs.GPUs {
		if !g.Model.Valid() || g.MIGMode != nvml.MIGEnabled {
			continue
		}
		gl := strconv.Itoa(g.Index)
		m.ComputeSlices.WithLabelValues(gl).Set(float64(g.Model.ComputeSlices()))
		m.MemorySlices.WithLabelValues(gl).Set(float64(g.Model.MemorySlices()))
		var insts []mig.Instance
		for _, s := range g.Slices {
			state, h := stateOrphaned, holder{}
			if name, ok := sliceDevice(g, s); ok {
				if hh, ok := held[name]; ok {
					state, h = stateAllocated, hh
				}
			}
			profile := mig.LegalProfileName(s.Profile)
			m.Instances.WithLabelValues(gl, profile, state).Inc()
			m.SliceInfo.WithLabelValues(gl, profile, fmt.Sprintf("%d:%d", s.Placement.Start, s.Placement.Size), state, h.Namespace, h.Pod).Set(1)
			insts = append(insts, mig.Instance{Profile: s.Profile, Placement: s.Placement})
		}
		st, err := mig.NewGPUState(g.Model, insts)
		if err != nil {
			continue
		}
		free := st.FreeComputeSlices()
		m.FreeCompute.WithLabelValues(gl).Set(float64(free))
		m.FreeMemory.WithLabelValues(gl).Set(float64(g.Model.MemorySlices() - st.UsedMemorySlices()))
		largest := 0
		for _, p := range g.Model.Profiles() {
			if st.Fits(p) && p.ComputeSlices > largest {
				largest = p.ComputeSlices
			}
		}
		frag := 0.0
		if free > 0 {
			frag = 1 - float64(largest)/float64(free)
		}
		m.Fragmentation.WithLabelValues(gl).Set(frag)
	}
}
