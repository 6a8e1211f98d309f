package engine

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilstrings "k8s.io/utils/strings"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// NodeView is what the NodeAccelerator status is rendered from.
type NodeView struct {
	Emulated  bool
	DriverErr error
	// Conflict: another tool owns the node (migapi.NodeForeign).
	Conflict migapi.Foreign
	// Bypass: a RuntimeClass selects the node's NVIDIA runtime (RuntimeBypass).
	Bypass migapi.Bypass
	// NotServing says why the frontend's kubelet endpoint does not serve (nil: it does; the
	// device-plugin frontend always does, since its devices come and go with the slices).
	NotServing error
	Obs        *Observation
	// SliceState and holder per Slice.Key: an allocation (device-plugin frontend) or a
	// claim (DRA frontend), never both. A slice in none is Orphaned.
	States  map[string]slicerv1alpha1.SliceState
	Holders map[string]types.NamespacedName
	Claims  map[string]slicerv1alpha1.ClaimReference
	// ModePolicies is the GPU mode policy the agent applies to each GPU, by UUID: written as
	// status.gpus[].modePolicy and .resetAllowed. Only a frontend that switches MIG modes
	// sets it, and only for the GPUs it may switch (a GPU in none gets neither field).
	ModePolicies map[string]migapi.ModePolicy
	// ModeSwitches is the switch the agent decided on this pass for each GPU, by UUID
	// (engine.DecideModeSwitch; renderMode).
	ModeSwitches map[string]*ModeReport
	// ModeSwitchesDone is, for each GPU whose MIG mode SetMIGMode made current at once on
	// this pass, by UUID, how long the call took: the switch's duration where the status
	// it replaces did not show it pending (Metrics.modeSwitchesDone).
	ModeSwitchesDone map[string]time.Duration
}

// renderStatus computes the NodeAccelerator status (pure but for the transition times of
// conditions that change; conditions and mode switches keep theirs when unchanged, and a
// mode switch that starts or changes takes now).
func renderStatus(old slicerv1alpha1.NodeAcceleratorStatus, generation int64, v NodeView, now time.Time) slicerv1alpha1.NodeAcceleratorStatus {
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
	var migOff []string
	if v.Obs != nil {
		st.DriverVersion = v.Obs.DriverVersion
		oldSwitches := oldModeSwitches(old)
		for _, g := range v.Obs.GPUs {
			gs := slicerv1alpha1.GPUStatus{Index: int32(g.Index), UUID: g.UUID, ProductName: utilstrings.ShortenString(g.ProductName, 96), MemoryMiB: int64(g.MemoryMiB), Health: slicerv1alpha1.GPUHealthy}
			if g.Model.Valid() {
				gs.Model = slicerv1alpha1.GPUModel(g.Model.String())
			}
			if !g.Healthy {
				gs.Health = slicerv1alpha1.GPUUnhealthy
				gs.HealthMessage = utilstrings.ShortenString(g.Unusable(), 256)
			}
			switch {
			case !g.MIGSupported:
				gs.MIGMode = slicerv1alpha1.MIGModeNotSupported
			case g.MIGMode == nvml.MIGEnabled:
				gs.MIGMode = slicerv1alpha1.MIGModeEnabled
			default:
				gs.MIGMode = slicerv1alpha1.MIGModeDisabled
				migOff = append(migOff, fmt.Sprintf("GPU %d", g.Index))
			}
			gs.Mode, gs.ModeSwitch = renderMode(g, v.ModeSwitches[g.UUID], oldSwitches[g.UUID], metav1.NewTime(now))
			if p, ok := v.ModePolicies[g.UUID]; ok {
				gs.ModePolicy, gs.ResetAllowed = p.Mode, p.AllowReset && p.Mode == slicerv1alpha1.GPUModePolicyDynamic
			}
			for _, s := range g.Slices {
				ms := slicerv1alpha1.MIGSlice{
					Profile: migapi.APIProfile(s.Profile), Placement: migapi.APIPlacement(s.Placement),
					GPUInstanceID: int32(s.GI), MIGDeviceUUID: s.MIGUUID, State: slicerv1alpha1.SliceOrphaned,
				}
				if s.CI >= 0 {
					ms.ComputeInstanceID = int32(s.CI)
				}
				if s.Unhealthy != "" {
					ms.Health, ms.HealthMessage = slicerv1alpha1.GPUUnhealthy, utilstrings.ShortenString(s.Unhealthy, 256)
				}
				if state, ok := v.States[s.Key()]; ok {
					ms.State = state
				}
				if h, ok := v.Holders[s.Key()]; ok {
					ms.Allocation = &slicerv1alpha1.AllocationReference{Namespace: h.Namespace, Name: h.Name}
				} else if c, ok := v.Claims[s.Key()]; ok {
					ms.Claim = &c
				}
				gs.Slices = append(gs.Slices, ms)
			}
			st.GPUs = append(st.GPUs, gs)
		}
	}
	if v.DriverErr != nil {
		set(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionTrue, slicerv1alpha1.ReasonNVMLUnavailable, utilstrings.ShortenString(v.DriverErr.Error(), 1024))
	} else {
		set(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "NVML is usable")
	}
	if len(migOff) > 0 {
		set(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionTrue, slicerv1alpha1.ReasonMIGModeOff, utilstrings.ShortenString(
			"MIG mode is off on MIG-capable "+strings.Join(migOff, ", ")+": Slicer makes no MIG slice there; "+
				"status.gpus[].mode and .modeSwitch say whether a switch is under way (the agent switches MIG modes only by the policies of spec.gpuModes, which .modePolicy names)", 1024))
	} else {
		set(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "MIG mode is enabled on every MIG-capable GPU")
	}
	setUnrecognized(set, v.Obs)
	if v.Conflict.Present() {
		set(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionTrue, v.Conflict.Reason, utilstrings.ShortenString(v.Conflict.Message, 1024))
	} else {
		set(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected,
			"no other MIG manager or device plugin of NVIDIA's resources owns the node")
	}
	switch {
	case v.Bypass.Present():
		set(slicerv1alpha1.ConditionRuntimeBypass, metav1.ConditionTrue, v.Bypass.Reason, utilstrings.ShortenString(v.Bypass.Message, 1024))
	case v.Bypass.Unknown:
		set(slicerv1alpha1.ConditionRuntimeBypass, metav1.ConditionUnknown, slicerv1alpha1.ReasonRuntimeClassesUnreadable, utilstrings.ShortenString(v.Bypass.Message, 1024))
	default:
		msg := v.Bypass.Message
		if msg == "" {
			msg = "no RuntimeClass selects an NVIDIA runtime of this node"
		}
		set(slicerv1alpha1.ConditionRuntimeBypass, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, utilstrings.ShortenString(msg, 1024))
	}
	switch {
	case v.DriverErr != nil:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, slicerv1alpha1.ReasonNVMLUnavailable, "NVML is not usable")
	case v.Conflict.Present():
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, v.Conflict.Reason, "another tool owns the node's MIG devices (OwnershipConflict says which and how to fix it)")
	case v.NotServing != nil:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionFalse, slicerv1alpha1.ReasonPluginNotServing, utilstrings.ShortenString(v.NotServing.Error(), 1024))
	default:
		set(slicerv1alpha1.ConditionReady, metav1.ConditionTrue, slicerv1alpha1.ReasonAsExpected, "the agent manages the node's GPUs")
	}
	return st
}

// ClaimView is the node as the DRA frontend sees it.
type ClaimView struct {
	Emulated bool
	// DriverErr is why NVML is not usable (Obs is then nil).
	DriverErr error
	// NotServing is why the kubelet plugin does not serve (nil: it does).
	NotServing error
	// Conflict: another tool owns the node (migapi.NodeForeign).
	Conflict migapi.Foreign
	// Bypass: a RuntimeClass selects the node's NVIDIA runtime (RuntimeBypass).
	Bypass migapi.Bypass
	Obs    *Observation
	// Claim names the allocated claim that holds observed slice s of GPU g (false: none).
	Claim func(g *GPU, s Slice) (slicerv1alpha1.ClaimReference, bool)
	// ModePolicies, ModeSwitches and ModeSwitchesDone are NodeView's.
	ModePolicies     map[string]migapi.ModePolicy
	ModeSwitches     map[string]*ModeReport
	ModeSwitchesDone map[string]time.Duration
}

// NodeView is the status view of v: each observed slice that a claim holds is Allocated
// with that claim, any other is Orphaned (the DRA frontend destroys instances within one
// sync, so none is ever seen PendingDelete).
func (v ClaimView) NodeView() NodeView {
	nv := NodeView{Emulated: v.Emulated, DriverErr: v.DriverErr, NotServing: v.NotServing, Conflict: v.Conflict, Bypass: v.Bypass, Obs: v.Obs,
		States: map[string]slicerv1alpha1.SliceState{}, Claims: map[string]slicerv1alpha1.ClaimReference{},
		ModePolicies: v.ModePolicies, ModeSwitches: v.ModeSwitches, ModeSwitchesDone: v.ModeSwitchesDone}
	if v.Obs == nil || v.Claim == nil {
		return nv
	}
	for _, g := range v.Obs.GPUs {
		for _, sl := range g.Slices {
			if ref, ok := v.Claim(g, sl); ok {
				nv.States[sl.Key()], nv.Claims[sl.Key()] = slicerv1alpha1.SliceAllocated, ref
			}
		}
	}
	return nv
}

// setUnrecognized sets UnrecognizedGPU: True, naming them, when NVML reports MIG on GPUs that
// are no model of internal/mig (the agent leaves those alone).
func setUnrecognized(set func(t string, s metav1.ConditionStatus, reason, msg string), obs *Observation) {
	var which []string
	reason := slicerv1alpha1.ReasonUnknownGPUModel
	if obs != nil {
		for _, g := range obs.GPUs {
			if !g.MIGSupported || g.Unrecognized == nil {
				continue
			}
			if len(which) == 0 && g.Unrecognized.Reason == mig.MemoryMismatch {
				reason = slicerv1alpha1.ReasonGPUMemoryMismatch
			}
			which = append(which, fmt.Sprintf("GPU %d: %v", g.Index, g.Unrecognized))
		}
	}
	if len(which) == 0 {
		set(slicerv1alpha1.ConditionUnrecognizedGPU, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, "every MIG-capable GPU is a model Slicer knows")
		return
	}
	set(slicerv1alpha1.ConditionUnrecognizedGPU, metav1.ConditionTrue, reason,
		utilstrings.ShortenString(strings.Join(which, "; ")+"; Slicer makes no slice on them", 1024))
}
