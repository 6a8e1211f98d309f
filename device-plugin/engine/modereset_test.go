package engine

import (
	"testing"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// On an A100 whose policy allows a reset, the agent resets the GPU itself once it is empty, on
// the emulated NVML (an nvml.GPUResetter): the change is asked and made current in one step;
// a change already pending is finished by a reset alone; a client holding the GPU keeps it
// pending (HeldByClient) until it lets go; a GPU with an instance is not reset; without
// allowReset the switch fails (ResetNotAllowed) and nothing is reset.
func TestAgentResetsAnAmpereGPUItsPolicyAllows(t *testing.T) {
	lib, err := emulated.New(emulated.Options{Node: "n", GPUs: []mig.Model{mig.A100_80GB}})
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	observe := func() *GPU {
		t.Helper()
		obs, err := Observe(lib, m)
		if err != nil {
			t.Fatal(err)
		}
		return obs.GPUs[0]
	}
	allow := ModeInput{Policy: migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true}, Need: NeedWhole}
	g := observe()
	if !g.CanReset() {
		t.Fatal("the emulated GPU cannot be reset")
	}

	// A client holds it: asked, reset refused, pending.
	if err := lib.HoldGPU(0, true); err != nil {
		t.Fatal(err)
	}
	step := DecideModeSwitch(g, allow)
	if !step.Set || !step.Reset {
		t.Fatalf("step %+v, want set and reset", step)
	}
	if r := SetModeStep(g, step); r == nil || r.Reason != slicerv1alpha1.GPUModeSwitchHeldByClient || r.Phase != slicerv1alpha1.GPUModeSwitchPending {
		t.Fatalf("under a holder: %+v", r)
	}
	g = observe()
	if g.MIGMode != nvml.MIGEnabled || !g.MIGModePending {
		t.Fatalf("mode %s pending %v, want the change pending", g.MIGMode, g.MIGModePending)
	}

	// It lets go: the pending change is finished by the reset alone.
	if err := lib.HoldGPU(0, false); err != nil {
		t.Fatal(err)
	}
	step = DecideModeSwitch(g, allow)
	if step.Set || !step.Reset {
		t.Fatalf("step %+v, want a reset alone", step)
	}
	if r := SetModeStep(g, step); r != nil {
		t.Fatalf("reset: %+v", r)
	}
	if g = observe(); g.MIGMode != nvml.MIGDisabled || g.MIGModePending {
		t.Fatalf("after the reset: mode %s pending %v", g.MIGMode, g.MIGModePending)
	}

	// Back to MIG in one step (asked, then reset).
	back := allow
	back.Need = NeedMIG
	if r := SetModeStep(g, DecideModeSwitch(g, back)); r != nil {
		t.Fatalf("back to MIG: %+v", r)
	}
	if g = observe(); g.MIGMode != nvml.MIGEnabled || g.MIGModePending {
		t.Fatalf("back to MIG: mode %s pending %v", g.MIGMode, g.MIGModePending)
	}

	// An instance on it: no reset, no call.
	if _, err := lib.CreateInstance(0, "1g.10gb", 0, false); err != nil {
		t.Fatal(err)
	}
	g = observe()
	if step := DecideModeSwitch(g, allow); step.Set || step.Reset || step.Switch == nil || step.Switch.Reason != slicerv1alpha1.GPUModeSwitchInstancesPresent {
		t.Fatalf("with an instance: %+v", step)
	}
	// Without allowReset: refused, nothing reset.
	noReset := allow
	noReset.Policy.AllowReset = false
	if step := DecideModeSwitch(g, noReset); step.Set || step.Reset || step.Switch == nil || step.Switch.Reason != slicerv1alpha1.GPUModeSwitchResetNotAllowed {
		t.Fatalf("without allowReset: %+v", step)
	}
}
