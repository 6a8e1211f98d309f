package migapi

import (
	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Switchable reports whether the scheduler may ask GPU g's agent to switch its MIG mode
// (mig.GPU.Switchable): the agent applies the mode policy Dynamic to it
// (status.gpus[].modePolicy), the GPU is a MIG model of internal/mig's tables, and a change
// that needs a GPU reset (A100, A30: mig.Model.ModeChangeNeedsReset) is allowed one
// (status.gpus[].resetAllowed). An agent that leaves modePolicy unset does not switch, so
// none of its GPUs is switchable.
func Switchable(g *slicerv1alpha1.GPUStatus) bool {
	if g.ModePolicy != slicerv1alpha1.GPUModePolicyDynamic || g.Model == "" {
		return false
	}
	model, err := mig.ParseModel(string(g.Model))
	if err != nil {
		return false
	}
	return !model.ModeChangeNeedsReset() || g.ResetAllowed
}

// PolicyBlocks says why GPU g, in mode (the mode NVML reports, GPUServes), takes no new
// request of any kind ("" when its policy lets it serve in that mode): a fixed mode policy
// other than the mode it is in, which its agent switches it out of once it is empty.
func PolicyBlocks(mode mig.GPUMode, g *slicerv1alpha1.GPUStatus) string {
	switch {
	case g.ModePolicy == slicerv1alpha1.GPUModePolicyWhole && mode == mig.ModeMIG:
		return "the GPU's mode policy is Whole: its agent switches it out of MIG mode once it is empty"
	case g.ModePolicy == slicerv1alpha1.GPUModePolicyMIG && mode == mig.ModeWhole:
		return "the GPU's mode policy is MIG: its agent switches it into MIG mode"
	}
	return ""
}
