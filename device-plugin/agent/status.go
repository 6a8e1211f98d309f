package agent

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// nodeView is what the NodeAccelerator status is rendered from.
type nodeView struct {
	Emulated  bool
	DriverErr error
	// Conflict: another tool owns the node (migapi.NodeForeign).
	Conflict migapi.Foreign
	// NotServing says why the frontend's kubelet endpoint does not serve (nil: it does; the
	// device-plugin frontend always does, since its devices come and go with the slices).
	NotServing error
	Obs        *Observation
	// SliceState and holder per MIG UUID or orphan key: an allocation (device-plugin
	// frontend) or a claim (DRA frontend), never both.
	States  map[string]slicerv1alpha1.SliceState
	Holders map[string]types.NamespacedName
	Claims  map[string]slicerv1alpha1.ClaimReference
}

func sliceKey(s Slice) string { return orphanKey(s) }

// renderStatus computes the NodeAccelerator status (pure; conditions keep
// their transition times when unchanged).
func renderStatus(old slicerv1alpha1.NodeAcceleratorStatus, generation int64, v nodeView) slicerv1alpha1.NodeAcceleratorStatus {
	st := slicerv1alpha1.NodeAcceleratorStatus{Conditions: append([]metav1.Condition(nil), old.Conditions...)}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation})
	}
	switch {
	case v.DriverErr != nil:
		st.Driver = slicerv1alpha1.DriverStateNotReady
	case v.Emulated:
		st.Driver = slicerv1alpha1.DriverStateEmulated
	default:
		st.Driver = slicerv1alpha1.DriverStateReady
	}
	migOff := 0
	if v.Obs != nil {
		st.DriverVersion = v.Obs.DriverVersion
		for _, g := range v.Obs.GPUs {
			gs := slicerv1alpha1.GPUStatus{Index: int32(g.Index), UUID: g.UUID, ProductName: truncate(g.ProductName, 96), MemoryMiB: int64(g.MemoryMiB), Health: slicerv1alpha1.GPUHealthy}
			if g.Model.Valid() {
				gs.Model = slicerv1alpha1.GPUModel(g.Model.String())
			}
			if !g.Healthy {
				gs.Health = slicerv1alpha1.GPUUnhealthy
			}
			switch {
			case !g.MIGSupported:
				gs.MIGMode = slicerv1alpha1.MIGModeNotSupported
			case g.MIGMode == nvml.MIGEnabled:
				gs.MIGMode = slicerv1alpha1.MIGModeEnabled
			default:
				gs.MIGMode = slicerv1alpha1.MIGModeDisabled
				migOff++
			}
			for _, s := range g.Slices {
				ms := slicerv1alpha1.MIGSlice{
					Profile: migapi.APIProfile(s.Profile), Placement: migapi.APIPlacement(s.Placement),
					GPUInstanceID: int32(s.GI), MIGDeviceUUID: s.MIGUUID, State: slicerv1alpha1.SliceOrphaned,
				}
				if s.CI >= 0 {
					ms.ComputeInstanceID = int32(s.CI)
				}
				if state, ok := v.States[sliceKey(s)]; ok {
					ms.State = state
				}
				if h, ok := v.Holders[sliceKey(s)]; ok {
					ms.Allocation = &slicerv1alpha1.AllocationReference{Namespace: h.Namespace, Name: h.Name}
				} else if c, ok := v.Claims[sliceKey(s)]; ok {
					ms.Claim = &c
				}
				gs.Slices = append(gs.Slices, ms)
			}
			st.GPUs = append(st.GPUs, gs)
		}
	}
	if v.DriverErr != nil {
		set(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionTrue, slicerv1alpha1.ReasonNVMLUnavailable, truncate(v.DriverErr.Error(), 1024))
	} else {
		set(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "NVML is usable")
	}
	if migOff > 0 {
		set(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionTrue, slicerv1alpha1.ReasonMIGModeOff, "a MIG-capable GPU has MIG mode disabled; the agent never changes MIG mode")
	} else {
		set(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "MIG mode is enabled on every MIG-capable GPU")
	}
	if v.Conflict.Present() {
		set(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionTrue, v.Conflict.Reason, truncate(v.Conflict.Message, 1024))
	} else {
		set(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected,
			"no other MIG manager or device plugin of NVIDIA's resources owns the node")
	}
	switch {
	case v.DriverErr != nil:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, slicerv1alpha1.ReasonNVMLUnavailable, "NVML is not usable")
	case v.Conflict.Present():
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, v.Conflict.Reason, "another tool owns the node's MIG devices (OwnershipConflict says which and how to fix it)")
	case v.NotServing != nil:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, slicerv1alpha1.ReasonPluginNotServing, truncate(v.NotServing.Error(), 1024))
	default:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, "the agent manages the node's GPUs")
	}
	return st
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
