package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

func TestModeTarget(t *testing.T) {
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	pol := func(m slicerv1alpha1.GPUModePolicyMode) migapi.ModePolicy { return migapi.ModePolicy{Mode: m} }
	for _, tc := range []struct {
		policy migapi.ModePolicy
		need   ModeNeed
		want   nvml.MIGMode
		ok     bool
	}{
		{pol(slicerv1alpha1.GPUModePolicyWhole), NeedNone, D, true},
		{pol(slicerv1alpha1.GPUModePolicyWhole), NeedMIG, D, true},
		{pol(slicerv1alpha1.GPUModePolicyMIG), NeedNone, E, true},
		{pol(slicerv1alpha1.GPUModePolicyMIG), NeedWhole, E, true},
		{pol(slicerv1alpha1.GPUModePolicyDynamic), NeedMIG, E, true},
		{pol(slicerv1alpha1.GPUModePolicyDynamic), NeedWhole, D, true},
		{pol(slicerv1alpha1.GPUModePolicyDynamic), NeedNone, 0, false},
		{pol(slicerv1alpha1.GPUModePolicyDynamic), NeedBoth, 0, false},
		{migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyWhole, NotMIGCapable: true}, NeedWhole, 0, false},
	} {
		got, ok := ModeTarget(tc.policy, tc.need)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("ModeTarget(%s, need %d) = %s, %v; want %s, %v", tc.policy.Mode, tc.need, got, ok, tc.want, tc.ok)
		}
	}
	if n := NeedNone.Add(false).Add(false); n != NeedMIG {
		t.Errorf("two slices need %d", n)
	}
	if n := NeedNone.Add(true).Add(false); n != NeedBoth {
		t.Errorf("a whole GPU and a slice need %d", n)
	}
}

// The decision table: target mode × emptiness × a model whose change needs a reset ×
// allowReset × a change already pending. SetMIGMode is called only on an empty GPU, never on
// an Ampere GPU without allowReset, and a pending change to the target on Ampere is waited
// for rather than asked again.
func TestDecideModeSwitch(t *testing.T) {
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	type want struct {
		set    bool
		phase  slicerv1alpha1.GPUModeSwitchPhase
		reason slicerv1alpha1.GPUModeSwitchReason
	}
	set := want{set: true}
	nothing := want{}
	report := func(p slicerv1alpha1.GPUModeSwitchPhase, r slicerv1alpha1.GPUModeSwitchReason) want {
		return want{phase: p, reason: r}
	}
	failed := func(r slicerv1alpha1.GPUModeSwitchReason) want { return report(slicerv1alpha1.GPUModeSwitchFailed, r) }
	waiting := func(r slicerv1alpha1.GPUModeSwitchReason) want { return report(slicerv1alpha1.GPUModeSwitchPending, r) }
	const (
		empty     = "empty"
		instances = "instances"
		busy      = "busy"
	)
	for _, tc := range []struct {
		model      mig.Model
		policy     slicerv1alpha1.GPUModePolicyMode
		allowReset bool
		need       ModeNeed
		cur, pend  nvml.MIGMode
		occupancy  string
		want       want
	}{
		// Hopper: no reset needed.
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, E, E, empty, set},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, E, E, instances, failed(slicerv1alpha1.GPUModeSwitchInstancesPresent)},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, E, E, busy, waiting(slicerv1alpha1.GPUModeSwitchHeldByClient)},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, E, D, empty, set}, // held before: ask again
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, D, D, empty, nothing},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, D, E, empty, set}, // cancel a change away
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, D, E, busy, nothing},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyMIG, false, NeedNone, D, D, empty, set},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyMIG, false, NeedWhole, D, D, busy, waiting(slicerv1alpha1.GPUModeSwitchHeldByClient)},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyMIG, false, NeedNone, E, E, instances, nothing},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedWhole, E, E, empty, set},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedWhole, E, E, instances, failed(slicerv1alpha1.GPUModeSwitchInstancesPresent)},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedMIG, D, D, empty, set},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedMIG, D, D, busy, waiting(slicerv1alpha1.GPUModeSwitchHeldByClient)},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedNone, E, E, empty, nothing},
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedNone, D, E, empty, nothing}, // no need: keep, pending included
		{mig.H100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedBoth, E, E, empty, nothing},
		// Ampere: a reset is needed.
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedWhole, E, E, empty, failed(slicerv1alpha1.GPUModeSwitchResetNotAllowed)},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedWhole, E, E, instances, failed(slicerv1alpha1.GPUModeSwitchResetNotAllowed)},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedWhole, E, E, empty, set},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedWhole, E, E, instances, failed(slicerv1alpha1.GPUModeSwitchInstancesPresent)},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedWhole, E, E, busy, waiting(slicerv1alpha1.GPUModeSwitchHeldByClient)},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedWhole, E, D, empty, waiting(slicerv1alpha1.GPUModeSwitchResetRequired)},
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, false, NeedWhole, E, D, empty, waiting(slicerv1alpha1.GPUModeSwitchResetRequired)}, // asked by hand
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedMIG, E, D, empty, set},                                                   // cancel
		{mig.A100_80GB, slicerv1alpha1.GPUModePolicyDynamic, true, NeedMIG, D, D, empty, set},
		{mig.A30_24GB, slicerv1alpha1.GPUModePolicyWhole, false, NeedNone, E, E, empty, failed(slicerv1alpha1.GPUModeSwitchResetNotAllowed)},
		{mig.A30_24GB, slicerv1alpha1.GPUModePolicyMIG, false, NeedNone, D, D, empty, failed(slicerv1alpha1.GPUModeSwitchResetNotAllowed)},
		{mig.A30_24GB, slicerv1alpha1.GPUModePolicyMIG, false, NeedNone, E, E, empty, nothing},
	} {
		name := fmt.Sprintf("%s %s reset=%v need=%d %s->%s %s", tc.model, tc.policy, tc.allowReset, tc.need, tc.cur, tc.pend, tc.occupancy)
		g := &GPU{Index: 0, UUID: testGPU, Model: tc.model, MIGSupported: true, MIGMode: tc.cur, MIGModePending: tc.cur != tc.pend, Healthy: true}
		in := ModeInput{Policy: migapi.ModePolicy{Mode: tc.policy, AllowReset: tc.allowReset}, Need: tc.need}
		switch tc.occupancy {
		case instances:
			p := tc.model.Profiles()[0]
			g.Slices = []Slice{{Slot: slot(testGPU, p.Name, 0, p.MemorySlices), GI: 1, CI: 0, MIGUUID: "MIG-1"}}
		case busy:
			in.Busy = "allocation team-a/a1 holds it"
		}
		step := DecideModeSwitch(g, in)
		got := want{set: step.Set}
		if step.Switch != nil {
			got.phase, got.reason = step.Switch.Phase, step.Switch.Reason
			if step.Switch.Message == "" {
				t.Errorf("%s: a switch without a message", name)
			}
			if tgt, _ := ModeTarget(in.Policy, in.Need); step.Switch.TargetMode != modeOf(tgt) {
				t.Errorf("%s: switch to %s; want %s", name, step.Switch.TargetMode, modeOf(tgt))
			}
		}
		if got != tc.want {
			t.Errorf("%s: %+v; want %+v", name, got, tc.want)
		}
		if step.Set {
			if tgt, ok := ModeTarget(in.Policy, in.Need); !ok || step.Target != tgt {
				t.Errorf("%s: sets %s; want the target", name, step.Target)
			}
		}
	}
}

// A GPU that cannot be switched safely is left alone whatever the policy says.
func TestDecideModeSwitchLeavesAlone(t *testing.T) {
	whole := ModeInput{Policy: migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyWhole}}
	base := func() *GPU {
		return &GPU{UUID: testGPU, Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true}
	}
	for name, mutate := range map[string]func(*GPU){
		"unhealthy":     func(g *GPU) { g.markUnhealthy("Xid 79") },
		"unobserved":    func(g *GPU) { g.Err, g.Healthy = errors.New("boom"), false },
		"no MIG":        func(g *GPU) { g.MIGSupported = false },
		"unknown model": func(g *GPU) { g.Model = 0 },
	} {
		g := base()
		mutate(g)
		if step := DecideModeSwitch(g, whole); step.Set || step.Switch != nil {
			t.Errorf("%s: %+v; want nothing", name, step)
		}
	}
}

func TestAfterSetMIGMode(t *testing.T) {
	g := &GPU{Index: 3, UUID: testGPU, Model: mig.A100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true}
	for _, tc := range []struct {
		name       string
		activation nvml.Return
		err        error
		phase      slicerv1alpha1.GPUModeSwitchPhase
		reason     slicerv1alpha1.GPUModeSwitchReason
		says       string
	}{
		{"done", nvml.Success, nil, "", "", ""},
		{"held", nvml.ErrorInUse, nil, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient, "a client"},
		{"reset", nvml.ErrorResetRequired, nil, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchResetRequired, "after a GPU reset"},
		{"instances", nvml.Success, nvml.NewError("DeviceSetMigMode", nvml.ErrorInUse, "GPU 3 has 1 GPU instance(s)"), slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchInstancesPresent, "has 1 GPU instance"},
		{"no permission", nvml.Success, nvml.NewError("DeviceSetMigMode", nvml.ErrorNoPermission, ""), slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchNVMLError, "DeviceSetMigMode"},
		{"odd activation", nvml.ErrorUnknown, nil, slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchNVMLError, "activation"},
	} {
		r := AfterSetMIGMode(g, nvml.MIGDisabled, tc.activation, tc.err)
		switch {
		case tc.phase == "" && r != nil:
			t.Errorf("%s: %+v; want none", tc.name, *r)
		case tc.phase == "":
		case r == nil:
			t.Errorf("%s: none; want %s/%s", tc.name, tc.phase, tc.reason)
		case r.Phase != tc.phase || r.Reason != tc.reason || r.TargetMode != slicerv1alpha1.GPUModeWhole || !strings.Contains(r.Message, tc.says):
			t.Errorf("%s: %+v; want %s/%s to Whole saying %q", tc.name, *r, tc.phase, tc.reason, tc.says)
		}
	}
}

// What the agent decides is rendered next to what NVML reports, and the apiserver takes it:
// a Failed or waiting switch leaves the GPU in its mode, a change NVML holds pending is
// Switching with the agent's reason, and modePolicy/resetAllowed are written only for the
// GPUs the view names.
func TestRenderModeWithSwitches(t *testing.T) {
	v := newStatusValidator(t)
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	gpu := func(i int, m mig.Model, cur, pend nvml.MIGMode) *GPU {
		return &GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: m, ProductName: m.String(), MIGSupported: true, MIGMode: cur, MIGModePending: cur != pend, Healthy: true}
	}
	rep := func(target slicerv1alpha1.GPUMode, p slicerv1alpha1.GPUModeSwitchPhase, r slicerv1alpha1.GPUModeSwitchReason) *ModeReport {
		return &ModeReport{TargetMode: target, Phase: p, Reason: r, Message: "why"}
	}
	dyn := migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyDynamic}
	obs := &Observation{GPUs: []*GPU{
		gpu(0, mig.A100_80GB, E, E), // Failed ResetNotAllowed: stays MIG
		gpu(1, mig.H100_80GB, E, D), // held: Switching, the agent's reason
		gpu(2, mig.H100_80GB, D, D), // waiting for a whole allocation to go: stays Whole
		gpu(3, mig.A100_80GB, D, E), // pending by hand, no report: the inferred reason
		gpu(4, mig.H100_80GB, E, E), // a stale report to its own mode: dropped
		{Index: 5, UUID: "GPU-5", ProductName: "NVIDIA T4", Healthy: true},
	}}
	view := NodeView{Obs: obs,
		ModeSwitches: map[string]*ModeReport{
			"GPU-0": rep(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchResetNotAllowed),
			"GPU-1": rep(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient),
			"GPU-2": rep(slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient),
			"GPU-4": rep(slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient),
		},
		ModePolicies: map[string]migapi.ModePolicy{
			"GPU-0": dyn, "GPU-1": dyn, "GPU-2": {Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true},
			"GPU-5": {Mode: slicerv1alpha1.GPUModePolicyWhole, NotMIGCapable: true},
		},
	}
	st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, view, testNow)
	type got struct {
		mode          slicerv1alpha1.GPUMode
		target        slicerv1alpha1.GPUMode
		phase         slicerv1alpha1.GPUModeSwitchPhase
		reason        slicerv1alpha1.GPUModeSwitchReason
		policy        slicerv1alpha1.GPUModePolicyMode
		resetAllowed  bool
		sinceRendered bool
	}
	want := []got{
		{slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchResetNotAllowed, slicerv1alpha1.GPUModePolicyDynamic, false, true},
		{slicerv1alpha1.GPUModeSwitching, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient, slicerv1alpha1.GPUModePolicyDynamic, false, true},
		{slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient, slicerv1alpha1.GPUModePolicyDynamic, true, true},
		{slicerv1alpha1.GPUModeSwitching, slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchResetRequired, "", false, true},
		{slicerv1alpha1.GPUModeMIG, "", "", "", "", false, false},
		{slicerv1alpha1.GPUModeWhole, "", "", "", slicerv1alpha1.GPUModePolicyWhole, false, false},
	}
	for i, gs := range st.GPUs {
		g := got{mode: gs.Mode, policy: gs.ModePolicy, resetAllowed: gs.ResetAllowed}
		if sw := gs.ModeSwitch; sw != nil {
			g.target, g.phase, g.reason, g.sinceRendered = sw.TargetMode, sw.Phase, sw.Reason, sw.LastTransitionTime.Equal(&metav1.Time{Time: testNow})
		}
		if g != want[i] {
			t.Errorf("GPU %d: %+v; want %+v", i, g, want[i])
		}
	}
	for _, err := range v.errors(t, st) {
		t.Errorf("the apiserver would refuse the status: %v", err)
	}
}
