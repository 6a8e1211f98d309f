package migapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Blocked is why a GPU a NodeAccelerator reports can take no slice whatever its occupancy,
// as a kind a program can branch on; GPUBlocked also words it. The scheduler's snapshot and
// `slicer slice-map` both ask GPUBlocked, so they give the same reason.
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
)

// GPUBlocked says why GPU g of na can take no slice, NotBlocked and "" when it can.
func GPUBlocked(na *slicerv1alpha1.NodeAccelerator, g *slicerv1alpha1.GPUStatus) (Blocked, string) {
	if _, err := mig.ParseModel(string(g.Model)); g.Model == "" || err != nil {
		return BlockedModel, "not a supported MIG model"
	}
	if g.MIGMode != slicerv1alpha1.MIGModeEnabled {
		return BlockedMIGMode, "MIG mode is " + string(g.MIGMode)
	}
	if g.Health != slicerv1alpha1.GPUHealthy {
		return BlockedHealth, "GPU is " + string(g.Health)
	}
	if why := NodeBlocked(na); why != "" {
		return BlockedNode, why
	}
	return NotBlocked, ""
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
