package engine

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilstrings "k8s.io/utils/strings"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Each GPU's mode in the NodeAccelerator status (docs/gpu-modes.md, "NodeAccelerator: each
// GPU's mode"), read from the current and pending MIG mode NVML reports, with the switch the
// agent decided on this pass (modeswitch.go) where it has one. An agent without GPU mode
// policies (no --gpu-modes) decides none: it reports a switch that is pending, and renders no
// Failed switch nor the reasons only its own switch can have (ResetNotAllowed,
// InstancesPresent, NVMLError). migMode stays the current mode whatever is pending: it is what
// the agent and the scheduler (internal/mig/migapi.GPUBlocked) read to make slices now.

// renderMode is g's mode and the switch of its MIG mode under way, if any. report is the
// switch the agent decided on this pass (nil: none); old is the switch the status last held
// for g: a switch with the same target, phase and reason keeps its transition time, any other
// starts at now. mode is "" when g's MIG mode was not read (an NVML call failed before it):
// not known, so not said.
//
// While NVML reports a pending change, the GPU is Switching to the pending mode, with the
// agent's reason when it reported one for that target, else the reason pendingSwitchReason
// infers. Otherwise the GPU is in its current mode, with the agent's switch to the other one
// if it reported one (Pending while something holds the GPU, Failed when it gave up).
func renderMode(g *GPU, report *ModeReport, old *slicerv1alpha1.GPUModeSwitch, now metav1.Time) (slicerv1alpha1.GPUMode, *slicerv1alpha1.GPUModeSwitch) {
	var mode slicerv1alpha1.GPUMode
	var sw *slicerv1alpha1.GPUModeSwitch
	switch {
	case !g.MIGSupported && g.Err != nil:
		return "", nil
	case !g.MIGSupported:
		return slicerv1alpha1.GPUModeWhole, nil
	case g.MIGModePending:
		mode = slicerv1alpha1.GPUModeSwitching
		sw = &slicerv1alpha1.GPUModeSwitch{TargetMode: modeOf(g.PendingMIGMode()), Phase: slicerv1alpha1.GPUModeSwitchPending}
		if report != nil && report.TargetMode == sw.TargetMode {
			sw.Phase, sw.Reason, sw.Message = report.Phase, report.Reason, report.Message
		} else {
			sw.Reason, sw.Message = pendingSwitchReason(g)
		}
	case report != nil && report.TargetMode != modeOf(g.MIGMode):
		mode = modeOf(g.MIGMode)
		sw = &slicerv1alpha1.GPUModeSwitch{TargetMode: report.TargetMode, Phase: report.Phase, Reason: report.Reason, Message: report.Message}
	default:
		return modeOf(g.MIGMode), nil
	}
	sw.Message, sw.LastTransitionTime = utilstrings.ShortenString(sw.Message, 256), now
	if old != nil && old.TargetMode == sw.TargetMode && old.Phase == sw.Phase && old.Reason == sw.Reason && !old.LastTransitionTime.IsZero() {
		sw.LastTransitionTime = old.LastTransitionTime
	}
	return mode, sw
}

// modeOf is the mode of a GPU whose MIG mode is m, none pending.
func modeOf(m nvml.MIGMode) slicerv1alpha1.GPUMode {
	if m == nvml.MIGEnabled {
		return slicerv1alpha1.GPUModeMIG
	}
	return slicerv1alpha1.GPUModeWhole
}

// pendingSwitchReason says why g's pending MIG mode, which the agent did not report a switch
// for, has not taken effect: on a model whose change waits for a GPU reset, the reset (which
// the agent does only under a policy that allows one); on any other, a client that holds the GPU (a process, DCGM, a monitoring daemon), since such a change
// takes effect at once on an idle GPU. Of a GPU of no model Slicer knows, it cannot say
// which, and says so.
func pendingSwitchReason(g *GPU) (slicerv1alpha1.GPUModeSwitchReason, string) {
	pending := fmt.Sprintf("MIG mode %s is pending (current: %s)", g.PendingMIGMode(), g.MIGMode)
	switch {
	case g.Model.ModeChangeNeedsReset():
		return slicerv1alpha1.GPUModeSwitchResetRequired,
			fmt.Sprintf("%s: on %s it takes effect after a GPU reset, which the agent does only where the GPU's mode policy allows one (allowReset)", pending, g.Model)
	case g.Model.Valid():
		return slicerv1alpha1.GPUModeSwitchHeldByClient,
			fmt.Sprintf("%s: on %s it takes effect once no client (a process, DCGM, a monitoring daemon) holds the GPU", pending, g.Model)
	}
	return slicerv1alpha1.GPUModeSwitchHeldByClient,
		fmt.Sprintf("%s: it takes effect once no client holds the GPU, or after a GPU reset on A100 and A30 (%s is no MIG model Slicer knows)", pending, g.ProductName)
}

// oldModeSwitches is the mode switch of each GPU of st, by UUID.
func oldModeSwitches(st slicerv1alpha1.NodeAcceleratorStatus) map[string]*slicerv1alpha1.GPUModeSwitch {
	out := map[string]*slicerv1alpha1.GPUModeSwitch{}
	for i := range st.GPUs {
		if st.GPUs[i].ModeSwitch != nil {
			out[st.GPUs[i].UUID] = st.GPUs[i].ModeSwitch
		}
	}
	return out
}
