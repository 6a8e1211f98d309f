package snapshot

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// blockingConditions make every GPU of a node unusable while True.
var blockingConditions = []string{slicerv1alpha1.ConditionOwnershipConflict, slicerv1alpha1.ConditionDriverNotReady}

// MayFreeRoom says (in words, "" for no) whether a NodeAccelerator update may
// have freed room: a blocking condition cleared, a GPU added or usable again
// (or its model changed), a slice gone from a GPU, or another driver version
// (which may have profiles the older lacked, driver.go). Slices added, GPUs
// gone or unusable, and changes to other fields free nothing. The cache
// (SetNodeAccelerator) and the scheduler plugin's queueing hint both use it.
func MayFreeRoom(oldNA, newNA *slicerv1alpha1.NodeAccelerator) string {
	for _, t := range blockingConditions {
		if conditionTrue(oldNA.Status.Conditions, t) && !conditionTrue(newNA.Status.Conditions, t) {
			return "condition " + t + " cleared"
		}
	}
	if oldNA.Status.DriverVersion != newNA.Status.DriverVersion {
		return "driver " + newNA.Status.DriverVersion + " replaced " + oldNA.Status.DriverVersion
	}
	oldGPUs := make(map[string]*slicerv1alpha1.GPUStatus, len(oldNA.Status.GPUs))
	for i := range oldNA.Status.GPUs {
		oldGPUs[oldNA.Status.GPUs[i].UUID] = &oldNA.Status.GPUs[i]
	}
	for i := range newNA.Status.GPUs {
		g := &newNA.Status.GPUs[i]
		og := oldGPUs[g.UUID]
		switch {
		case og == nil:
			return "GPU " + g.UUID + " added"
		case og.Model != g.Model:
			return "GPU " + g.UUID + " model changed"
		case gpuUsable(g) && !gpuUsable(og):
			return "GPU " + g.UUID + " usable again"
		}
		now := make(map[sliceKey]bool, len(g.Slices))
		for _, s := range g.Slices {
			now[sliceKey{s.Profile, s.Placement}] = true
		}
		for _, s := range og.Slices {
			if !now[sliceKey{s.Profile, s.Placement}] {
				return "slice " + string(s.Profile) + " released on GPU " + g.UUID
			}
		}
	}
	return ""
}

type sliceKey struct {
	profile   slicerv1alpha1.MIGProfile
	placement slicerv1alpha1.Placement
}

func gpuUsable(g *slicerv1alpha1.GPUStatus) bool {
	return g.MIGMode == slicerv1alpha1.MIGModeEnabled && g.Health == slicerv1alpha1.GPUHealthy
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
