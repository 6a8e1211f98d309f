package migapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Blocked is why a GPU a NodeAccelerator reports can take no slice whatever its occupancy,
// as a kind a program can branch on; GPUBlocked also words it. The scheduler's snapshot and
// `slicer slice-map` both ask GPUServes and SlicesBlocked (GPUBlocked is the two in one), so
// they give the same reason.
type Blocked string

const (
	// NotBlocked: the GPU can take slices where its occupancy leaves room.
	NotBlocked Blocked = ""
	// BlockedModel: the GPU is not a MIG model of internal/mig's tables.
	BlockedModel Blocked = "unsupportedModel"
	// BlockedMIGMode: MIG mode is not enabled on the GPU.
	BlockedMIGMode Blocked = "migDisabled"
	// BlockedHealth: the GPU is not healthy.
	BlockedHealth Blocked = "unhealthy"
	// BlockedNode: a condition of the node's NodeAccelerator blocks every GPU (NodeBlocked).
	BlockedNode Blocked = "nodeBlocked"
	// BlockedWholeMode: the GPU is in whole mode (MIG off): it serves a whole-GPU request and
	// no slice.
	BlockedWholeMode Blocked = "wholeMode"
	// BlockedSwitching: the GPU's MIG mode is being switched; it serves nothing until the
	// change has taken effect.
	BlockedSwitching Blocked = "switchingMode"
)

// GPUBlocked says why GPU g of na can take no slice, NotBlocked and "" when it can: GPUServes,
// then SlicesBlocked.
func GPUBlocked(na *slicerv1alpha1.NodeAccelerator, g *slicerv1alpha1.GPUStatus) (Blocked, string) {
	mode, blocked, why := GPUServes(na, g)
	if blocked != NotBlocked {
		return blocked, why
	}
	return SlicesBlocked(mode, g)
}

// GPUServes is GPU g's mode as internal/mig names it (mig.GPU.Mode) and why the GPU serves
// nothing in that mode (NotBlocked and "" when it serves: mig.GPU.Usable). status.gpus[].mode
// (api/v1alpha1/gpumode_types.go) gives the mode; an agent that predates modes leaves it unset
// and publishes a GPU with migMode Enabled as MIG slices and no other GPU, so such a GPU is in
// MIG mode and, without MIG mode enabled, serves nothing. A GPU in MIG mode needs a MIG model
// of internal/mig's tables and MIG mode enabled; a whole or switching GPU needs neither. Every
// GPU needs health and a node no condition blocks.
func GPUServes(na *slicerv1alpha1.NodeAccelerator, g *slicerv1alpha1.GPUStatus) (mig.GPUMode, Blocked, string) {
	mode := mig.ModeMIG
	switch g.Mode {
	case slicerv1alpha1.GPUModeMIG, "":
	case slicerv1alpha1.GPUModeWhole:
		mode = mig.ModeWhole
	case slicerv1alpha1.GPUModeSwitching:
		mode = mig.ModeSwitching
	default: // the CRD's enum keeps this from happening
		return mig.ModeSwitching, BlockedSwitching, "GPU mode " + string(g.Mode) + " is unknown"
	}
	if mode == mig.ModeMIG {
		if _, err := mig.ParseModel(string(g.Model)); g.Model == "" || err != nil {
			return mode, BlockedModel, "not a supported MIG model"
		}
		if g.MIGMode != slicerv1alpha1.MIGModeEnabled {
			return mode, BlockedMIGMode, "MIG mode is " + string(g.MIGMode)
		}
	}
	if g.Health != slicerv1alpha1.GPUHealthy {
		return mode, BlockedHealth, "GPU is " + string(g.Health)
	}
	if why := NodeBlocked(na); why != "" {
		return mode, BlockedNode, why
	}
	return mode, NotBlocked, ""
}

// SlicesBlocked says why a GPU that serves in mode (GPUServes) takes no slice: it is whole, or
// switching (with where its modeSwitch stands); NotBlocked in MIG mode.
func SlicesBlocked(mode mig.GPUMode, g *slicerv1alpha1.GPUStatus) (Blocked, string) {
	switch mode {
	case mig.ModeMIG:
		return NotBlocked, ""
	case mig.ModeWhole:
		return BlockedWholeMode, "GPU is in whole mode (MIG off)"
	}
	why := "GPU is switching MIG mode"
	if s := g.ModeSwitch; s != nil {
		why += " (to " + string(s.TargetMode) + ", " + string(s.Phase) + ": " + string(s.Reason)
		if s.Message != "" {
			why += ", " + s.Message
		}
		why += ")"
	}
	return BlockedSwitching, why
}

// NodeBlocked is why no GPU of the node can take a slice ("" when none): another tool owns
// MIG on it, or its driver is not ready.
func NodeBlocked(na *slicerv1alpha1.NodeAccelerator) string {
	for _, cond := range na.Status.Conditions {
		if cond.Status != metav1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case slicerv1alpha1.ConditionOwnershipConflict:
			return "MIG is managed by another tool (" + cond.Reason + ")"
		case slicerv1alpha1.ConditionDriverNotReady:
			return "GPU driver not ready (" + cond.Reason + ")"
		}
	}
	return ""
}
