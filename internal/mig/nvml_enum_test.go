package mig

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The tables store NVML enums as plain integers; this checks them against go-nvml.
func TestNVMLEnums(t *testing.T) {
	gi := map[string]int{
		"1g": nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g+me": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
		"1g-double": nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "2g": nvml.GPU_INSTANCE_PROFILE_2_SLICE,
		"2g+me": nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, "3g": nvml.GPU_INSTANCE_PROFILE_3_SLICE,
		"4g": nvml.GPU_INSTANCE_PROFILE_4_SLICE, "7g": nvml.GPU_INSTANCE_PROFILE_7_SLICE,
	}
	ci := map[int]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}
	for _, m := range Models() {
		for _, p := range m.Profiles() {
			key := p.Name[:2]
			switch {
			case p.MediaExtensions:
				key += "+me"
			case p.ComputeSlices == 1 && p.MemorySlices == 2:
				key = "1g-double"
			}
			if p.NVMLProfile != gi[key] {
				t.Errorf("%s %s: NVML profile %d, go-nvml says %d", m, p.Name, p.NVMLProfile, gi[key])
			}
			if p.ComputeInstanceProfile != ci[p.ComputeSlices] {
				t.Errorf("%s %s: CI profile %d, go-nvml says %d", m, p.Name, p.ComputeInstanceProfile, ci[p.ComputeSlices])
			}
		}
	}
}
