package dra

import (
	"testing"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

func policy(mode slicerv1alpha1.GPUModePolicyMode, allowReset bool) migapi.ModePolicy {
	return migapi.ModePolicy{Mode: mode, AllowReset: allowReset}
}

// Which GPUs the pool publishes both ways, which only as their mode is, and which not at all,
// by policy, model and mode.
func TestPoolGPUsFollowTheModePolicies(t *testing.T) {
	h, a100 := h100(t), mig.A100_40GB
	gpu := func(i int, m mig.Model, mode nvml.MIGMode, pending bool) *engine.GPU {
		return &engine.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: m, Healthy: true, MIGSupported: true, MIGMode: mode, MIGModePending: pending}
	}
	obs := &engine.Observation{GPUs: []*engine.GPU{
		gpu(0, h, nvml.MIGEnabled, false),  // Dynamic: both ways
		gpu(1, h, nvml.MIGDisabled, false), // Dynamic, whole now: both ways
		gpu(2, a100, nvml.MIGEnabled, false),
		gpu(3, a100, nvml.MIGEnabled, false),
		gpu(4, h, nvml.MIGEnabled, false),  // Whole, in MIG mode: hidden
		gpu(5, h, nvml.MIGDisabled, false), // Whole and whole: as it is
		gpu(6, h, nvml.MIGEnabled, true),   // MIG, leaving MIG mode: hidden
		gpu(7, h, nvml.MIGDisabled, false), // no policy
	}}
	modes := map[string]migapi.ModePolicy{
		"GPU-a": policy(slicerv1alpha1.GPUModePolicyDynamic, false),
		"GPU-b": policy(slicerv1alpha1.GPUModePolicyDynamic, false),
		"GPU-c": policy(slicerv1alpha1.GPUModePolicyDynamic, false), // Ampere without reset: as it is
		"GPU-d": policy(slicerv1alpha1.GPUModePolicyDynamic, true),  // Ampere with reset: both ways
		"GPU-e": policy(slicerv1alpha1.GPUModePolicyWhole, false),
		"GPU-f": policy(slicerv1alpha1.GPUModePolicyWhole, false),
		"GPU-g": policy(slicerv1alpha1.GPUModePolicyMIG, false),
	}
	got := map[int]string{}
	for _, g := range poolGPUs(obs, nil, modes) {
		switch {
		case g.Switchable && g.State.Valid():
			got[g.Index] = "both"
		case g.MIGEnabled && g.State.Valid():
			got[g.Index] = "mig"
		default:
			got[g.Index] = "whole"
		}
	}
	want := map[int]string{0: "both", 1: "both", 2: "mig", 3: "both", 5: "whole", 7: "whole"}
	if len(got) != len(want) {
		t.Fatalf("published %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("GPU %d published %q, want %q", i, got[i], w)
		}
	}
}

// modeSteps: a whole claim on an empty MIG GPU switches it, a slice claim on a whole GPU
// switches it back, a whole GPU a record keeps is held (the switch pending with its holder),
// a GPU with no claim keeps its mode, and a fixed policy switches an empty GPU to its mode.
func TestModeStepsFollowTheClaims(t *testing.T) {
	h := h100(t)
	gpu := func(i int, mode nvml.MIGMode) *engine.GPU {
		return &engine.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: h, Healthy: true, MIGSupported: true, MIGMode: mode}
	}
	obs := &engine.Observation{GPUs: []*engine.GPU{
		gpu(0, nvml.MIGEnabled), gpu(1, nvml.MIGDisabled), gpu(2, nvml.MIGDisabled), gpu(3, nvml.MIGEnabled), gpu(4, nvml.MIGEnabled),
	}}
	dynamic := policy(slicerv1alpha1.GPUModePolicyDynamic, false)
	modes := map[string]migapi.ModePolicy{"GPU-a": dynamic, "GPU-b": dynamic, "GPU-c": dynamic, "GPU-d": dynamic,
		"GPU-e": policy(slicerv1alpha1.GPUModePolicyWhole, false)}
	held := map[string][]string{"gpu-0": {"uid-w"}, "gpu-1-1g-10gb-at-0": {"uid-s"}, "gpu-2-1g-10gb-at-0": {"uid-t"}}
	recs := map[string]record{"uid-old": {UID: "uid-old", Whole: []cdi.WholeGPU{{UUID: "GPU-c"}}}}
	steps := modeSteps(obs, modes, held, recs, false)
	type want struct {
		set    bool
		target nvml.MIGMode
		reason slicerv1alpha1.GPUModeSwitchReason
	}
	for uuid, w := range map[string]want{
		"GPU-a": {set: true, target: nvml.MIGDisabled},
		"GPU-b": {set: true, target: nvml.MIGEnabled},
		"GPU-c": {target: nvml.MIGEnabled, reason: slicerv1alpha1.GPUModeSwitchHeldByClient},
		"GPU-d": {},
		"GPU-e": {set: true, target: nvml.MIGDisabled},
	} {
		s := steps[uuid]
		reason := slicerv1alpha1.GPUModeSwitchReason("")
		if s.Switch != nil {
			reason = s.Switch.Reason
		}
		if s.Set != w.set || (w.set || w.reason != "") && s.Target != w.target || reason != w.reason {
			t.Errorf("%s: step %+v (reason %q), want %+v", uuid, s, reason, w)
		}
	}
	if steps := modeSteps(obs, modes, held, recs, true); steps != nil {
		t.Errorf("another tool owns the node, steps %v", steps)
	}
}
