package nvml

import (
	"fmt"
	"sort"
)

// ObservedCI is a compute instance found on a GPU instance.
type ObservedCI struct {
	ID int
	// Profile is the COMPUTE_INSTANCE_PROFILE_* value.
	Profile int
	// MIGUUID is the MIG device's UUID ("" when NVML did not list one).
	MIGUUID string
	Handle  ComputeInstance
}

// ObservedGI is a GPU instance found on a device, with its compute instances.
type ObservedGI struct {
	ID int
	// Profile is the GPU_INSTANCE_PROFILE_* value.
	Profile   int
	Placement Placement
	CIs       []ObservedCI
	Handle    GPUInstance
}

// ListInstances enumerates a device's MIG state the way recovery must: GPU
// instances first (for every GPU_INSTANCE_PROFILE_* value in giProfiles), then
// the compute instances of each (for every COMPUTE_INSTANCE_PROFILE_* value in
// ciProfiles), then the MIG devices, matched to compute instances by id.
// Profiles the device does not support are skipped. The result is ordered by
// placement start.
func ListInstances(dev Device, giProfiles, ciProfiles []int) ([]ObservedGI, error) {
	var out []ObservedGI
	for _, gp := range giProfiles {
		info, err := dev.GPUInstanceProfileInfo(gp)
		if ReturnOf(err) == ErrorNotSupported || ReturnOf(err) == ErrorInvalidArgument {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("GPU instance profile %d: %w", gp, err)
		}
		gis, err := dev.GPUInstances(info)
		if err != nil {
			return nil, fmt.Errorf("GPU instances of profile %d: %w", gp, err)
		}
		for _, gi := range gis {
			gii, err := gi.Info()
			if err != nil {
				return nil, fmt.Errorf("GPU instance info: %w", err)
			}
			out = append(out, ObservedGI{ID: gii.ID, Profile: gp, Placement: gii.Placement, Handle: gi})
		}
	}
	for i := range out {
		for _, cp := range ciProfiles {
			info, err := out[i].Handle.ComputeInstanceProfileInfo(cp)
			if ReturnOf(err) == ErrorNotSupported || ReturnOf(err) == ErrorInvalidArgument {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("GPU instance %d: compute instance profile %d: %w", out[i].ID, cp, err)
			}
			cis, err := out[i].Handle.ComputeInstances(info)
			if err != nil {
				return nil, fmt.Errorf("GPU instance %d: compute instances: %w", out[i].ID, err)
			}
			for _, ci := range cis {
				cii, err := ci.Info()
				if err != nil {
					return nil, fmt.Errorf("GPU instance %d: compute instance info: %w", out[i].ID, err)
				}
				out[i].CIs = append(out[i].CIs, ObservedCI{ID: cii.ID, Profile: cp, Handle: ci})
			}
		}
	}
	if len(out) > 0 {
		devs, err := dev.MIGDevices()
		if err != nil {
			return nil, fmt.Errorf("MIG devices: %w", err)
		}
		for _, md := range devs {
			for i := range out {
				if out[i].ID != md.GPUInstanceID {
					continue
				}
				for j := range out[i].CIs {
					if out[i].CIs[j].ID == md.ComputeInstanceID {
						out[i].CIs[j].MIGUUID = md.UUID
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Placement.Start < out[j].Placement.Start })
	return out, nil
}
