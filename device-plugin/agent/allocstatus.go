package agent

import (
	"fmt"

	"k8s.io/utils/ptr"
	utilstrings "k8s.io/utils/strings"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// validate returns a Failed reason for an allocation the node cannot realize. switches: the
// agent has GPU mode policies (an allocation that waits for a switch they allow is not
// validated: waitsForMode).
func validate(obs *engine.Observation, a *slicerv1alpha1.SliceAllocation, switches bool) (reason, msg string) {
	g := obs.GPUByUUID(a.Spec.GPUUUID)
	if g == nil {
		return slicerv1alpha1.ReasonGPUNotFound, fmt.Sprintf("GPU %s is not on node %s", a.Spec.GPUUUID, a.Spec.NodeName)
	}
	if a.Spec.WholeGPU {
		// A whole GPU needs MIG mode off; one in MIG mode that waits for a switch its policy
		// allows is not validated (waitsForMode). Any GPU, of a MIG model or not, serves whole.
		switch {
		case g.MIGMode != nvml.MIGEnabled:
			return "", ""
		case switches:
			return slicerv1alpha1.ReasonMIGModeOn, fmt.Sprintf("GPU %s is in MIG mode, so it is not handed out whole; its mode policy (spec.gpuModes) does not let the agent switch it out of MIG mode (the NodeAccelerator status says why)", g.UUID)
		}
		return slicerv1alpha1.ReasonMIGModeOn, fmt.Sprintf("GPU %s is in MIG mode, so it is not handed out whole; the agent has no GPU mode policies (spec.gpuModes), so it does not change MIG mode", g.UUID)
	}
	if !g.MIGReady() {
		if g.MIGMode != nvml.MIGEnabled && switches {
			return slicerv1alpha1.ReasonMIGModeOff, fmt.Sprintf("GPU %s has MIG mode off, so it takes no MIG slice; its mode policy (spec.gpuModes) does not let the agent switch it to MIG mode (the NodeAccelerator status says why)", g.UUID)
		}
		if g.MIGMode != nvml.MIGEnabled {
			return slicerv1alpha1.ReasonMIGModeOff, fmt.Sprintf("GPU %s has MIG mode off, so it takes no MIG slice; the agent has no GPU mode policies (spec.gpuModes), so it does not change MIG mode (the NodeAccelerator status says whether a switch is pending)", g.UUID)
		}
		return slicerv1alpha1.ReasonInvalidPlacement, fmt.Sprintf("GPU %s (%s) is not a MIG model Slicer knows", g.UUID, g.ProductName)
	}
	p, err := g.Model.Profile(string(a.Spec.Profile))
	if err != nil {
		return slicerv1alpha1.ReasonInvalidPlacement, err.Error()
	}
	for _, pl := range p.Placements() {
		if pl == (mig.Placement{Start: int(a.Spec.Placement.Start), Size: int(a.Spec.Placement.Size)}) {
			return "", ""
		}
	}
	return slicerv1alpha1.ReasonInvalidPlacement, fmt.Sprintf("%s has no placement {start %d, size %d} on %s", p.Name, a.Spec.Placement.Start, a.Spec.Placement.Size, g.Model)
}

func base(a *slicerv1alpha1.SliceAllocation) slicerv1alpha1.SliceAllocationStatus {
	return slicerv1alpha1.SliceAllocationStatus{ObservedGeneration: a.Generation}
}

func failed(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationFailed, reason, utilstrings.ShortenString(msg, 1024)
	return s
}

func pending(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationPending, reason, utilstrings.ShortenString(msg, 1024)
	return s
}

func creating(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationCreating, reason, utilstrings.ShortenString(msg, 1024)
	return s
}

// releasing is a deleting allocation whose slice could not be destroyed yet (in use, or
// NVML failed): SlicerMIGSliceStuck fires when it stays so. A release that goes through is
// never written as Releasing: the finalizer goes and the allocation with it.
func releasing(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := a.Status
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationReleasing, reason, utilstrings.ShortenString(msg, 1024)
	return s
}

func ready(a *slicerv1alpha1.SliceAllocation, sl engine.Slice) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	gi, ci := int32(sl.GI), int32(sl.CI)
	s.State, s.MIGDeviceUUID, s.GPUInstanceID, s.ComputeInstanceID = slicerv1alpha1.AllocationReady, sl.MIGUUID, &gi, &ci
	s.Message = "MIG device " + sl.MIGUUID + " is ready"
	if sl.GPU != a.Spec.GPUUUID || sl.Placement != migapi.SlotAsWritten(&a.Spec).Placement {
		s.ActualPlacement = ptr.To(migapi.APIPlacement(sl.Placement))
		if sl.GPU != a.Spec.GPUUUID {
			s.ActualGPUUUID = sl.GPU
		}
		s.Message = fmt.Sprintf("the kubelet gave the pod MIG device %s on %s", sl.MIGUUID, sl.Slot)
	}
	return s
}
