// Package migapi converts between Slicer's API types (api/v1alpha1) and internal/mig's. A
// profile is spelled one way in memory — internal/mig's name, NVIDIA spelling ("1g.10gb+me") —
// and converted only where it crosses the API: from a CR with Profile or SlotOf, into one with
// APIProfile or APIPlacement. Resource names convert with mig.ProfileNameFromResource and
// mig.ResourceName.
package migapi

import (
	"fmt"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Profile is the internal name of a CR's profile.
func Profile(p slicerv1alpha1.MIGProfile) (string, error) {
	return mig.ParseProfileName(string(p))
}

// APIProfile is a profile as CRs spell it (Kubernetes spelling, ".me").
func APIProfile(name string) slicerv1alpha1.MIGProfile {
	return slicerv1alpha1.MIGProfile(mig.LegalProfileName(name))
}

// Placement converts a CR's placement.
func Placement(p slicerv1alpha1.Placement) mig.Placement {
	return mig.Placement{Start: int(p.Start), Size: int(p.Size)}
}

// APIPlacement converts a placement for a CR.
func APIPlacement(p mig.Placement) slicerv1alpha1.Placement {
	return slicerv1alpha1.Placement{Start: int32(p.Start), Size: int32(p.Size)}
}

// SlotOf is the slot a SliceAllocation's spec names: mig.WholeSlot for a whole GPU.
func SlotOf(spec *slicerv1alpha1.SliceAllocationSpec) (mig.Slot, error) {
	if spec.WholeGPU {
		return mig.WholeSlot(spec.GPUUUID), nil
	}
	prof, err := Profile(spec.Profile)
	if err != nil {
		return mig.Slot{}, fmt.Errorf("allocation profile: %w", err)
	}
	if spec.Placement == nil {
		return mig.Slot{}, fmt.Errorf("allocation of a %s slice names no placement", spec.Profile)
	}
	return mig.Slot{GPU: spec.GPUUUID, Profile: prof, Placement: Placement(*spec.Placement)}, nil
}

// SlotAsWritten is SlotOf, or when the spec does not convert (the CRD's enum and rules keep
// that from happening) its GPU, profile and placement as written.
func SlotAsWritten(spec *slicerv1alpha1.SliceAllocationSpec) mig.Slot {
	if slot, err := SlotOf(spec); err == nil {
		return slot
	}
	slot := mig.Slot{GPU: spec.GPUUUID, Profile: string(spec.Profile)}
	if spec.Placement != nil {
		slot.Placement = Placement(*spec.Placement)
	}
	return slot
}

// SpecSlot fills the GPU, profile and placement of an allocation's spec from slot (a whole
// GPU for mig.WholeSlot).
func SpecSlot(spec *slicerv1alpha1.SliceAllocationSpec, slot mig.Slot) {
	spec.GPUUUID = slot.GPU
	if slot.Whole() {
		spec.WholeGPU, spec.Profile, spec.Placement = true, "", nil
		return
	}
	p := APIPlacement(slot.Placement)
	spec.WholeGPU, spec.Profile, spec.Placement = false, APIProfile(slot.Profile), &p
}
