package agent

import (
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

func wholeGPU(a *slicerv1alpha1.SliceAllocation) {
	a.Spec.WholeGPU, a.Spec.Profile, a.Spec.Placement = true, "", nil
}

// gpuIn is testGPU of model m in MIG mode cur, with pend pending.
func gpuIn(m mig.Model, cur, pend nvml.MIGMode, slices ...engine.Slice) *engine.Observation {
	return &engine.Observation{GPUs: []*engine.GPU{{UUID: testGPU, Model: m, MIGSupported: true, MIGMode: cur, MIGModePending: cur != pend, Healthy: true, Slices: slices}}}
}

func TestModePolicies(t *testing.T) {
	obs := &engine.Observation{GPUs: []*engine.GPU{
		{UUID: "GPU-h100", Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true},
		{UUID: "GPU-a100", Model: mig.A100_80GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true},
		{UUID: "GPU-unknown", MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true},
		{UUID: "GPU-t4", Healthy: true},
	}}
	policies := []slicerv1alpha1.GPUModePolicy{
		{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic},
		{NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": "train"}}, Mode: slicerv1alpha1.GPUModePolicyWhole},
	}
	got := engine.ModePolicies(policies, obs, map[string]string{"pool": "train"}, logr.Discard())
	want := map[string]migapi.ModePolicy{
		"GPU-h100": {Mode: slicerv1alpha1.GPUModePolicyDynamic, Index: 0},
		"GPU-a100": {Mode: slicerv1alpha1.GPUModePolicyWhole, Index: 1},
		"GPU-t4":   {Mode: slicerv1alpha1.GPUModePolicyWhole, Index: migapi.NoModePolicy, NotMIGCapable: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ModePolicies (-want +got):\n%s", diff)
	}
	if got := engine.ModePolicies(policies, obs, nil, logr.Discard())["GPU-a100"]; got.Mode != slicerv1alpha1.GPUModePolicyMIG {
		t.Errorf("A100 off the train pool: %+v; want MIG (no policy)", got)
	}
	if got := engine.ModePolicies(nil, obs, nil, logr.Discard()); got != nil {
		t.Errorf("no policies: %v; want none (the agent switches nothing)", got)
	}
}

// What an allocation's GPU's policy makes of it before any slice work.
func TestDecideWithModes(t *testing.T) {
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	dyn := migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyDynamic}
	dynReset := migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true}
	whole := migapi.ModePolicy{Mode: slicerv1alpha1.GPUModePolicyWhole}
	s0 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0"}
	for _, tc := range []struct {
		name   string
		obs    *engine.Observation
		modes  map[string]migapi.ModePolicy
		alloc  *slicerv1alpha1.SliceAllocation
		status string
		jobs   []string
	}{
		{"a slice on a whole H100, Dynamic: waits for the switch", gpuIn(mig.H100_80GB, D, D), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("a", "1g.10gb", 0, 1), "a=Pending/" + ReasonWaitingForModeSwitch, nil},
		{"a slice on a whole H100, Whole: fails", gpuIn(mig.H100_80GB, D, D), map[string]migapi.ModePolicy{testGPU: whole},
			allocation("a", "1g.10gb", 0, 1), "a=Failed/MIGModeOff", nil},
		{"a slice on a whole H100, no policies: fails as before", gpuIn(mig.H100_80GB, D, D), nil,
			allocation("a", "1g.10gb", 0, 1), "a=Failed/MIGModeOff", nil},
		{"a slice on a whole A100, Dynamic without allowReset: fails", gpuIn(mig.A100_80GB, D, D), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("a", "1g.10gb", 0, 1), "a=Failed/MIGModeOff", nil},
		{"a slice on a whole A100, Dynamic with allowReset: waits", gpuIn(mig.A100_80GB, D, D), map[string]migapi.ModePolicy{testGPU: dynReset},
			allocation("a", "1g.10gb", 0, 1), "a=Pending/" + ReasonWaitingForModeSwitch, nil},
		{"a slice on an A100 whose MIG mode is pending on: waits", gpuIn(mig.A100_80GB, D, E), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("a", "1g.10gb", 0, 1), "a=Pending/" + ReasonWaitingForModeSwitch, nil},
		{"a slice on an H100 leaving MIG mode: no instance", gpuIn(mig.H100_80GB, E, D), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("a", "1g.10gb", 0, 1), "a=Pending/" + ReasonWaitingForModeSwitch, nil},
		{"a slice on a MIG H100, Whole: refused, no instance", gpuIn(mig.H100_80GB, E, E), map[string]migapi.ModePolicy{testGPU: whole},
			allocation("a", "1g.10gb", 0, 1), "a=Failed/MIGModeOff", nil},
		{"a Ready slice on a MIG H100, Whole: kept", gpuIn(mig.H100_80GB, E, E, s0), map[string]migapi.ModePolicy{testGPU: whole},
			allocation("a", "1g.10gb", 0, 1, holding("MIG-0"), inState(slicerv1alpha1.AllocationReady)), "", nil},
		{"a slice on a MIG H100, Dynamic: created", gpuIn(mig.H100_80GB, E, E), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("a", "1g.10gb", 0, 1), "", []string{"create a GPU-0 1g.10gb@0"}},
		{"a whole GPU on a MIG H100, Dynamic: waits for the switch", gpuIn(mig.H100_80GB, E, E), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("w", "", 0, 0, wholeGPU), "w=Pending/" + ReasonWaitingForModeSwitch, nil},
		{"a whole GPU on a whole H100: bound, nothing to run", gpuIn(mig.H100_80GB, D, D), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("w", "", 0, 0, wholeGPU), "", nil},
		{"a whole GPU on a MIG A100 without allowReset: fails", gpuIn(mig.A100_80GB, E, E), map[string]migapi.ModePolicy{testGPU: dyn},
			allocation("w", "", 0, 0, wholeGPU), "w=Failed/" + slicerv1alpha1.ReasonMIGModeOn, nil},
		{"a whole GPU on a MIG H100 without policies: fails", gpuIn(mig.H100_80GB, E, E), nil,
			allocation("w", "", 0, 0, wholeGPU), "w=Failed/" + slicerv1alpha1.ReasonMIGModeOn, nil},
		{"a whole GPU on a MIG H100, fixed MIG: fails", gpuIn(mig.H100_80GB, E, E), map[string]migapi.ModePolicy{testGPU: {Mode: slicerv1alpha1.GPUModePolicyMIG}},
			allocation("w", "", 0, 0, wholeGPU), "w=Failed/" + slicerv1alpha1.ReasonMIGModeOn, nil},
	} {
		d := decide(world{Obs: tc.obs, Modes: tc.modes, Allocs: allocMap(tc.alloc)})
		var want []string
		if tc.status != "" {
			want = []string{tc.status}
		}
		if diff := cmp.Diff(want, statusStrings(d.Statuses)); diff != "" {
			t.Errorf("%s: statuses (-want +got):\n%s", tc.name, diff)
		}
		var jobs []string
		for _, j := range d.Jobs {
			jobs = append(jobs, jobString(j))
		}
		if diff := cmp.Diff(tc.jobs, jobs); diff != "" {
			t.Errorf("%s: jobs (-want +got):\n%s", tc.name, diff)
		}
	}
}

// What each GPU's allocations and the kubelet make of its switch.
func TestModeSteps(t *testing.T) {
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	dyn := map[string]migapi.ModePolicy{testGPU: {Mode: slicerv1alpha1.GPUModePolicyDynamic}}
	wholePolicy := map[string]migapi.ModePolicy{testGPU: {Mode: slicerv1alpha1.GPUModePolicyWhole}}
	s0 := engine.Slice{Slot: slot(testGPU, "1g.10gb", 0, 1), GI: 1, CI: 0, MIGUUID: "MIG-0"}
	type step struct {
		set    bool
		target nvml.MIGMode
		reason slicerv1alpha1.GPUModeSwitchReason
	}
	for _, tc := range []struct {
		name     string
		w        world
		obs      *engine.Observation
		statuses map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus
		want     *step
	}{
		{"no policies", world{Allocs: allocMap(allocation("w", "", 0, 0, wholeGPU))}, gpuIn(mig.H100_80GB, E, E), nil, nil},
		{"Dynamic, no allocation: keep", world{Modes: dyn}, gpuIn(mig.H100_80GB, E, E), nil, &step{}},
		{"Dynamic, a whole allocation: switch off", world{Modes: dyn, Allocs: allocMap(allocation("w", "", 0, 0, wholeGPU))},
			gpuIn(mig.H100_80GB, E, E), nil, &step{set: true, target: D}},
		{"Dynamic, a slice allocation on a whole GPU: switch on", world{Modes: dyn, Allocs: allocMap(allocation("a", "1g.10gb", 0, 1))},
			gpuIn(mig.H100_80GB, D, D), nil, &step{set: true, target: E}},
		{"Dynamic, a slice waiting and a whole GPU held: wait", world{Modes: dyn, Allocs: allocMap(allocation("a", "1g.10gb", 0, 1),
			allocation("w", "", 0, 0, wholeGPU, deleting))}, gpuIn(mig.H100_80GB, D, D), nil,
			&step{target: E, reason: slicerv1alpha1.GPUModeSwitchHeldByClient}},
		{"Dynamic, a whole allocation but the kubelet lists a slice of it", world{Modes: dyn, Allocs: allocMap(allocation("w", "", 0, 0, wholeGPU)),
			Usage: map[string]string{testGPU + "_1g.10gb_0": "ns/old"}}, gpuIn(mig.H100_80GB, E, E), nil,
			&step{target: D, reason: slicerv1alpha1.GPUModeSwitchHeldByClient}},
		{"Dynamic, a whole allocation and an orphan instance", world{Modes: dyn, Allocs: allocMap(allocation("w", "", 0, 0, wholeGPU))},
			gpuIn(mig.H100_80GB, E, E, s0), nil, &step{target: D, reason: slicerv1alpha1.GPUModeSwitchInstancesPresent}},
		{"Dynamic, both kinds: keep", world{Modes: dyn, Allocs: allocMap(allocation("a", "1g.10gb", 0, 1), allocation("w", "", 0, 0, wholeGPU))},
			gpuIn(mig.H100_80GB, E, E), nil, &step{}},
		{"Dynamic, a whole allocation failed this pass: keep", world{Modes: dyn, Allocs: allocMap(allocation("w", "", 0, 0, wholeGPU))},
			gpuIn(mig.H100_80GB, D, D), map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{{Namespace: "ns", Name: "w"}: {State: slicerv1alpha1.AllocationFailed}}, &step{}},
		{"Whole, a slice refused this pass: switch off", world{Modes: wholePolicy, Allocs: allocMap(allocation("a", "1g.10gb", 0, 1))},
			gpuIn(mig.H100_80GB, E, E), map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{{Namespace: "ns", Name: "a"}: {State: slicerv1alpha1.AllocationFailed}}, &step{set: true, target: D}},
		{"Whole, a slice whose pod is gone: switch off", world{Modes: wholePolicy, Allocs: allocMap(allocation("a", "1g.10gb", 0, 1)),
			PodGone: map[types.NamespacedName]podEnd{{Namespace: "ns", Name: "a"}: {}}}, gpuIn(mig.H100_80GB, E, E), nil, &step{set: true, target: D}},
		{"another manager owns the node", world{Modes: wholePolicy, Conflict: migapi.Foreign{Reason: slicerv1alpha1.ReasonForeignMIGManager}},
			gpuIn(mig.H100_80GB, E, E), nil, nil},
	} {
		steps := modeSteps(tc.w, tc.obs, tc.statuses)
		s, ok := steps[testGPU]
		switch {
		case tc.want == nil && ok:
			t.Errorf("%s: step %+v; want none", tc.name, s)
		case tc.want == nil:
		case !ok:
			t.Errorf("%s: no step; want %+v", tc.name, *tc.want)
		default:
			got := step{set: s.Set}
			if s.Set || s.Switch != nil {
				got.target = s.Target
			}
			if s.Switch != nil {
				got.reason = s.Switch.Reason
			}
			if got != *tc.want {
				t.Errorf("%s: step %+v (%+v); want %+v", tc.name, got, s.Switch, *tc.want)
			}
		}
	}
}

// Each SetMIGMode call the agent makes is counted by what NVML answered, and a call that makes
// the mode current at once is timed for the status writer, on the emulated NVML: a client
// holds the H100 (pending), then lets it go (done); the A100 waits for a reset; asking the
// H100 for its mode again is no switch.
func TestSwitchModesCountsCalls(t *testing.T) {
	backend, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.A100_80GB}})
	if err != nil {
		t.Fatal(err)
	}
	if err := backend.Init(); err != nil {
		t.Fatal(err)
	}
	m := engine.NewMetrics(prometheus.NewRegistry())
	h100, a100 := emulated.GPUUUID("n1", 0), emulated.GPUUUID("n1", 1)
	off := engine.ModeStep{Set: true, Target: nvml.MIGDisabled}
	pass := func(steps map[string]engine.ModeStep) (map[string]*engine.ModeReport, []string) {
		t.Helper()
		obs, err := engine.Observe(backend, m)
		if err != nil {
			t.Fatal(err)
		}
		reports, done, called, _ := engine.SwitchModes(obs, steps, m, logr.Discard())
		if !called {
			t.Fatal("no SetMIGMode call")
		}
		return reports, slices.Sorted(maps.Keys(done))
	}
	calls := func() map[string]float64 {
		out := map[string]float64{}
		for _, res := range []string{"done", "cancelled", "held_by_client", "reset_required", "instances_present", "nvml_error"} {
			if v := testutil.ToFloat64(m.ModeSwitchRequests.WithLabelValues("whole", res)); v != 0 {
				out[res] = v
			}
		}
		return out
	}
	if err := backend.HoldGPU(0, true); err != nil {
		t.Fatal(err)
	}
	r, done := pass(map[string]engine.ModeStep{h100: off})
	if r[h100] == nil || r[h100].Reason != slicerv1alpha1.GPUModeSwitchHeldByClient || len(done) != 0 {
		t.Fatalf("held H100: %+v, done %v; want pending HeldByClient, none done", r[h100], done)
	}
	if diff := cmp.Diff(map[string]float64{"held_by_client": 1}, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if err := backend.HoldGPU(0, false); err != nil {
		t.Fatal(err)
	}
	r, done = pass(map[string]engine.ModeStep{h100: off, a100: off})
	if r[h100] != nil || r[a100] == nil || r[a100].Reason != slicerv1alpha1.GPUModeSwitchResetRequired {
		t.Fatalf("released H100 and A100: %+v, %+v; want done and pending ResetRequired", r[h100], r[a100])
	}
	if diff := cmp.Diff([]string{h100}, done); diff != "" {
		t.Errorf("done at once (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"held_by_client": 1, "done": 1, "reset_required": 1}, calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	// The H100 is whole now: asking again for whole is no switch.
	if _, done = pass(map[string]engine.ModeStep{h100: off}); len(done) != 0 {
		t.Errorf("asking for the current mode: done %v; want none", done)
	}
	if got := calls()["cancelled"]; got != 1 {
		t.Errorf("cancelled calls = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.ModeSwitchDuration); n != 0 {
		t.Errorf("the agent timed %d switch(es) itself; the status writer does", n)
	}
}
