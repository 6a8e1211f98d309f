package engine

import (
	"fmt"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Switching a GPU's MIG mode (docs/gpu-modes.md, "What the agent does"): the frontend says
// what the GPU's allocations need and what else holds it (ModeInput), DecideModeSwitch says
// what to do on this pass (ModeStep), the frontend calls SetModeStep when it says so and
// observes the GPU again, and the NodeAccelerator status reports the step's switch beside
// what NVML then reports (renderMode). Nothing is remembered between passes: each one starts
// from the mode NVML reports, so an agent that crashed or restarted at any step converges.

// ModeNeed is the MIG mode a GPU's live allocations need.
type ModeNeed int

const (
	// NeedNone: no live allocation on the GPU.
	NeedNone ModeNeed = iota
	// NeedMIG: MIG slice allocations only.
	NeedMIG
	// NeedWhole: whole-GPU allocations only.
	NeedWhole
	// NeedBoth: both kinds (the scheduler places none so): no mode serves them all, so the
	// GPU keeps its mode.
	NeedBoth
)

// Add is the need of n and one more allocation, whole or a slice.
func (n ModeNeed) Add(whole bool) ModeNeed {
	one := NeedMIG
	if whole {
		one = NeedWhole
	}
	switch n {
	case NeedNone, one:
		return one
	}
	return NeedBoth
}

// ModeTarget is the MIG mode that policy p asks of a GPU whose allocations need need: Whole
// → off, MIG → on, Dynamic → the mode need names. ok is false when the GPU keeps its current
// mode (Dynamic with no allocation, or with both kinds), and for a GPU of no MIG model.
func ModeTarget(p migapi.ModePolicy, need ModeNeed) (target nvml.MIGMode, ok bool) {
	switch {
	case p.NotMIGCapable:
		return 0, false
	case p.Mode == slicerv1alpha1.GPUModePolicyWhole:
		return nvml.MIGDisabled, true
	case p.Mode == slicerv1alpha1.GPUModePolicyMIG:
		return nvml.MIGEnabled, true
	case p.Mode == slicerv1alpha1.GPUModePolicyDynamic && need == NeedMIG:
		return nvml.MIGEnabled, true
	case p.Mode == slicerv1alpha1.GPUModePolicyDynamic && need == NeedWhole:
		return nvml.MIGDisabled, true
	}
	return 0, false
}

// ModeInput is what a frontend knows of one GPU beside NVML.
type ModeInput struct {
	Policy migapi.ModePolicy
	Need   ModeNeed
	// Busy says what, other than a MIG instance (GPU.Slices), holds the GPU in its current
	// mode: an allocation of the other kind, a device of the GPU the kubelet lists as
	// assigned to a pod. "" when nothing does.
	Busy string
}

// ModeStep is what to do about one GPU's MIG mode on one pass.
type ModeStep struct {
	// Set: call SetMIGMode(Target) (the GPU is empty and the switch allowed), then report
	// AfterSetMIGMode's switch.
	Set    bool
	Target nvml.MIGMode
	// Reset: reset the GPU for the change to Target to take effect (A100, A30), after Set's
	// call when it answers that a reset is needed, or alone when the change is pending
	// already. Only for an empty GPU whose policy allows a reset and whose backend can.
	Reset bool
	// Switch is the switch to report when Set is false; nil: nothing to add to what NVML
	// reports (renderMode).
	Switch *ModeReport
}

// ModeReport is a switch the agent reports of a GPU, beside what NVML reports of it.
type ModeReport struct {
	TargetMode slicerv1alpha1.GPUMode
	Phase      slicerv1alpha1.GPUModeSwitchPhase
	Reason     slicerv1alpha1.GPUModeSwitchReason
	Message    string
}

// DecideModeSwitch is what to do about g's MIG mode on this pass, given in. It is pure. Only a
// healthy, fully observed GPU of a MIG model is switched; only an empty one (no MIG instance,
// in.Busy empty) has SetMIGMode called or is reset; a model whose change needs a GPU reset is
// switched only where the policy allows one, and the agent then resets the GPU itself where
// its backend can (nvml.GPUResetter); where it cannot, the change stays pending until a
// reset by hand or a reboot.
func DecideModeSwitch(g *GPU, in ModeInput) ModeStep {
	if g.Err != nil || !g.Healthy || !g.MIGSupported || !g.Model.Valid() {
		return ModeStep{}
	}
	target, ok := ModeTarget(in.Policy, in.Need)
	if !ok {
		return ModeStep{}
	}
	empty := len(g.Slices) == 0 && in.Busy == ""
	if target == g.MIGMode {
		// A change away from the target is pending (asked by someone else, or by this agent
		// for allocations that are gone): asking for the current mode cancels it.
		return ModeStep{Set: g.MIGModePending && empty, Target: target}
	}
	report := func(phase slicerv1alpha1.GPUModeSwitchPhase, reason slicerv1alpha1.GPUModeSwitchReason, format string, args ...any) ModeStep {
		return ModeStep{Target: target, Switch: &ModeReport{TargetMode: modeOf(target), Phase: phase, Reason: reason, Message: fmt.Sprintf(format, args...)}}
	}
	needsReset := g.Model.ModeChangeNeedsReset()
	resets := needsReset && in.Policy.AllowReset && g.CanReset()
	switch {
	case g.MIGModePending && g.PendingMIGMode() == target && needsReset && resets && empty:
		// Asked already: the reset makes it current.
		return ModeStep{Reset: true, Target: target}
	case g.MIGModePending && g.PendingMIGMode() == target && needsReset:
		// Asked already (by this agent, or by hand): only a reset makes it current, which
		// waits for an empty GPU or is not the agent's to do.
		return report(slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchResetRequired, "%s", resetMessage(g, target, resets))
	case needsReset && !in.Policy.AllowReset:
		return report(slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchResetNotAllowed,
			"MIG mode %s on %s takes effect only after a GPU reset, and the GPU's policy does not allow one (allowReset)", target, g.Model)
	case len(g.Slices) > 0:
		return report(slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchInstancesPresent,
			"GPU %d has %d MIG instance(s): its MIG mode is switched only once it has none", g.Index, len(g.Slices))
	case in.Busy != "":
		return report(slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient,
			"GPU %d is switched to MIG mode %s once it is empty: %s", g.Index, target, in.Busy)
	}
	return ModeStep{Set: true, Target: target, Reset: resets}
}

// AfterSetMIGMode is the switch to report once SetMIGMode(target) on g returned activation
// and err (nvml.Device.SetMIGMode); nil when the call says the mode is current (the next
// observation shows it). The frontend observes the GPU again either way.
func AfterSetMIGMode(g *GPU, target nvml.MIGMode, activation nvml.Return, err error) *ModeReport {
	r := &ModeReport{TargetMode: modeOf(target), Phase: slicerv1alpha1.GPUModeSwitchPending}
	switch {
	case err != nil && nvml.IsInUse(err):
		r.Phase, r.Reason = slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchInstancesPresent
		r.Message = fmt.Sprintf("NVML refuses MIG mode %s while GPU %d has MIG instances: %v", target, g.Index, err)
	case err != nil:
		r.Phase, r.Reason, r.Message = slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchNVMLError, err.Error()
	case activation == nvml.Success || target == g.MIGMode:
		return nil
	case activation == nvml.ErrorInUse:
		r.Reason = slicerv1alpha1.GPUModeSwitchHeldByClient
		r.Message = fmt.Sprintf("MIG mode %s is pending on GPU %d: a client (a process, DCGM, a monitoring daemon) holds the GPU; the agent asks again on every pass", target, g.Index)
	case activation == nvml.ErrorResetRequired:
		r.Reason, r.Message = slicerv1alpha1.GPUModeSwitchResetRequired, resetMessage(g, target, false)
	default:
		r.Phase, r.Reason = slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchNVMLError
		r.Message = fmt.Sprintf("SetMIGMode(%s) on GPU %d: activation %s", target, g.Index, activation)
	}
	return r
}

// resetMessage says that g's change to target waits for a GPU reset: one the agent does once
// the GPU is empty (agentResets), or one it does not do itself.
func resetMessage(g *GPU, target nvml.MIGMode, agentResets bool) string {
	if agentResets {
		return fmt.Sprintf("MIG mode %s is pending on GPU %d: on %s it takes effect after a GPU reset, which the agent does once the GPU is empty", target, g.Index, g.Model)
	}
	return fmt.Sprintf("MIG mode %s is pending on GPU %d: on %s it takes effect after a GPU reset (nvidia-smi -r, or a reboot), which the agent does not do itself here (allowReset off, or its NVML backend cannot reset)", target, g.Index, g.Model)
}

// SetModeStep carries out step on g (SetMIGMode, then the reset it asks for) and returns the
// switch to report; for a step that does neither, its Switch.
func SetModeStep(g *GPU, step ModeStep) *ModeReport {
	if !step.Set && !step.Reset {
		return step.Switch
	}
	if step.Set {
		activation, err := g.dev.SetMIGMode(step.Target)
		if err != nil {
			err = fmt.Errorf("set MIG mode %s on GPU %d: %w", step.Target, g.Index, err)
		}
		r := AfterSetMIGMode(g, step.Target, activation, err)
		if !step.Reset || err != nil || activation != nvml.ErrorResetRequired {
			return r
		}
	}
	return AfterReset(g, step.Target, g.reset())
}

// AfterReset is the switch to report once the reset of g for a change to target returned err:
// nil when it succeeded (the next observation shows the mode current), else the change stays
// pending with the reset's error (a client or process holds the GPU: asked again next pass).
func AfterReset(g *GPU, target nvml.MIGMode, err error) *ModeReport {
	if err == nil {
		return nil
	}
	reason := slicerv1alpha1.GPUModeSwitchResetRequired
	if nvml.IsInUse(err) {
		reason = slicerv1alpha1.GPUModeSwitchHeldByClient
	}
	return &ModeReport{TargetMode: modeOf(target), Phase: slicerv1alpha1.GPUModeSwitchPending, Reason: reason,
		Message: fmt.Sprintf("MIG mode %s is pending on GPU %d: the agent's GPU reset failed, and is tried again: %v", target, g.Index, err)}
}
