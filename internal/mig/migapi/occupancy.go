package migapi

import (
	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// AppendReported appends to dst the occupants of the slices a NodeAccelerator reports on GPU g,
// in their order and as written (mig.Occupancy reads either spelling of a profile and says
// which name is no MIG profile), holding no one: the claims that hold them are listed by the
// caller, beside them, for mig.Occupancy.
func AppendReported(dst []mig.Occupant, g *slicerv1alpha1.GPUStatus) []mig.Occupant {
	for _, s := range g.Slices {
		dst = append(dst, mig.Occupant{Instance: mig.Instance{Profile: string(s.Profile), Placement: Placement(s.Placement)}})
	}
	return dst
}
