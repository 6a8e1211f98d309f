package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

// testNow is the clock of the rendering tests.
var testNow = time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)

// wantMode is what a GPU's status says of its mode.
type wantMode struct {
	migMode slicerv1alpha1.MIGMode
	mode    slicerv1alpha1.GPUMode
	// target and reason of the pending switch; target "" when none is pending.
	target slicerv1alpha1.GPUMode
	reason slicerv1alpha1.GPUModeSwitchReason
	// says is a part of the switch's message.
	says string
	// migOff: the GPU makes MIGDisabled True.
	migOff bool
}

// checkMode compares g's status with w; the switch, when there is one, is Pending since
// start.
func checkMode(t *testing.T, name string, gs slicerv1alpha1.GPUStatus, w wantMode, start time.Time) {
	t.Helper()
	if gs.MIGMode != w.migMode || gs.Mode != w.mode {
		t.Errorf("%s: migMode %q, mode %q; want %q, %q", name, gs.MIGMode, gs.Mode, w.migMode, w.mode)
	}
	sw := gs.ModeSwitch
	switch {
	case w.target == "" && sw != nil:
		t.Errorf("%s: modeSwitch %+v; want none", name, *sw)
	case w.target == "":
	case sw == nil:
		t.Errorf("%s: no modeSwitch; want one to %s", name, w.target)
	case sw.TargetMode != w.target || sw.Phase != slicerv1alpha1.GPUModeSwitchPending || sw.Reason != w.reason:
		t.Errorf("%s: modeSwitch %s/%s/%s; want %s/Pending/%s", name, sw.TargetMode, sw.Phase, sw.Reason, w.target, w.reason)
	case !strings.Contains(sw.Message, w.says):
		t.Errorf("%s: modeSwitch message %q does not say %q", name, sw.Message, w.says)
	case !sw.LastTransitionTime.Time.Equal(start):
		t.Errorf("%s: modeSwitch since %s; want %s", name, sw.LastTransitionTime, start)
	}
}

// Every combination of current and pending MIG mode, MIG support and model (a reset-bound
// Ampere GPU, a Hopper GPU, a GPU of no model Slicer knows), healthy or not: the mode is about
// MIG mode only, migMode stays the current mode, a pending change is a Pending switch whose
// reason is the reset on A100/A30 and a client holding the GPU elsewhere, and MIGDisabled
// names the MIG-capable GPUs whose current mode is off. Every status passes the CRD's schema
// and CEL rules.
func TestRenderModeCombinations(t *testing.T) {
	v := newStatusValidator(t)
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	mig_ := func() wantMode {
		return wantMode{migMode: slicerv1alpha1.MIGModeEnabled, mode: slicerv1alpha1.GPUModeMIG}
	}
	whole := func() wantMode {
		return wantMode{migMode: slicerv1alpha1.MIGModeDisabled, mode: slicerv1alpha1.GPUModeWhole, migOff: true}
	}
	toWhole := func(r slicerv1alpha1.GPUModeSwitchReason, says string) wantMode {
		return wantMode{migMode: slicerv1alpha1.MIGModeEnabled, mode: slicerv1alpha1.GPUModeSwitching, target: slicerv1alpha1.GPUModeWhole, reason: r, says: says}
	}
	toMIG := func(r slicerv1alpha1.GPUModeSwitchReason, says string) wantMode {
		return wantMode{migMode: slicerv1alpha1.MIGModeDisabled, mode: slicerv1alpha1.GPUModeSwitching, target: slicerv1alpha1.GPUModeMIG, reason: r, says: says, migOff: true}
	}
	const (
		reset  = "Disabled is pending (current: Enabled): on A100-40GB it takes effect after a GPU reset"
		resetE = "Enabled is pending (current: Disabled): on A30-24GB it takes effect after a GPU reset"
		held   = "Disabled is pending (current: Enabled): on H100-80GB it takes effect once no client"
		heldE  = "Enabled is pending (current: Disabled): on H100-80GB it takes effect once no client"
		who    = "it takes effect once no client holds the GPU, or after a GPU reset on A100 and A30 (NVIDIA H20-3e is no MIG model Slicer knows)"
	)
	for _, tc := range []struct {
		name      string
		model     mig.Model
		supported bool
		cur, pend nvml.MIGMode
		want      wantMode
	}{
		{"A100 MIG", mig.A100_40GB, true, E, E, mig_()},
		{"A100 whole", mig.A100_40GB, true, D, D, whole()},
		{"A100 to whole", mig.A100_40GB, true, E, D, toWhole(slicerv1alpha1.GPUModeSwitchResetRequired, reset)},
		{"A100 to MIG", mig.A100_40GB, true, D, E, toMIG(slicerv1alpha1.GPUModeSwitchResetRequired, "Enabled is pending (current: Disabled): on A100-40GB it takes effect after a GPU reset")},
		{"A30 MIG", mig.A30_24GB, true, E, E, mig_()},
		{"A30 whole", mig.A30_24GB, true, D, D, whole()},
		{"A30 to whole", mig.A30_24GB, true, E, D, toWhole(slicerv1alpha1.GPUModeSwitchResetRequired, "on A30-24GB it takes effect after a GPU reset")},
		{"A30 to MIG", mig.A30_24GB, true, D, E, toMIG(slicerv1alpha1.GPUModeSwitchResetRequired, resetE)},
		{"H100 MIG", mig.H100_80GB, true, E, E, mig_()},
		{"H100 whole", mig.H100_80GB, true, D, D, whole()},
		{"H100 to whole", mig.H100_80GB, true, E, D, toWhole(slicerv1alpha1.GPUModeSwitchHeldByClient, held)},
		{"H100 to MIG", mig.H100_80GB, true, D, E, toMIG(slicerv1alpha1.GPUModeSwitchHeldByClient, heldE)},
		{"unknown model MIG", 0, true, E, E, mig_()},
		{"unknown model whole", 0, true, D, D, whole()},
		{"unknown model to whole", 0, true, E, D, toWhole(slicerv1alpha1.GPUModeSwitchHeldByClient, who)},
		{"unknown model to MIG", 0, true, D, E, toMIG(slicerv1alpha1.GPUModeSwitchHeldByClient, who)},
		{"no MIG, known model", mig.H100_80GB, false, D, D, wantMode{migMode: slicerv1alpha1.MIGModeNotSupported, mode: slicerv1alpha1.GPUModeWhole}},
		{"no MIG", 0, false, D, D, wantMode{migMode: slicerv1alpha1.MIGModeNotSupported, mode: slicerv1alpha1.GPUModeWhole}},
	} {
		for _, health := range []string{"healthy", "unhealthy", "instances unreadable"} {
			name := tc.name + ", " + health
			g := &GPU{Index: 0, UUID: testGPU, ProductName: "NVIDIA H20-3e", Model: tc.model, MIGSupported: tc.supported,
				MIGMode: tc.cur, MIGModePending: tc.cur != tc.pend, Healthy: true}
			if tc.model.Valid() {
				g.ProductName = tc.model.String()
			}
			if g.MIGReady() {
				// Observe lists slices only in MIG mode; a switching GPU keeps them.
				g.Slices = []Slice{{Slot: slot(testGPU, tc.model.Profiles()[0].Name, 0, tc.model.Profiles()[0].MemorySlices), GI: 1, CI: 0, MIGUUID: "MIG-1"}}
			}
			switch health {
			case "unhealthy":
				g.markUnhealthy("Xid 79")
			case "instances unreadable":
				if !tc.supported {
					continue // MIG mode not read: TestRenderModeUnread
				}
				g.Healthy, g.Err, g.Slices = false, errors.New("device 0 instances: boom"), nil
			}
			st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, NodeView{Obs: &Observation{GPUs: []*GPU{g}}}, testNow)
			checkMode(t, name, st.GPUs[0], tc.want, testNow)
			if health != "healthy" && st.GPUs[0].Health != slicerv1alpha1.GPUUnhealthy {
				t.Errorf("%s: health %q", name, st.GPUs[0].Health)
			}
			c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionMIGDisabled)
			wantOff := metav1.ConditionFalse
			if tc.want.migOff {
				wantOff = metav1.ConditionTrue
			}
			if c == nil || c.Status != wantOff {
				t.Errorf("%s: MIGDisabled %+v; want %s", name, c, wantOff)
			}
			for _, err := range v.errors(t, st) {
				t.Errorf("%s: the apiserver would refuse the status: %v", name, err)
			}
		}
	}
}

// A GPU whose MIG mode was not read (an NVML call failed before) has no mode: not known.
func TestRenderModeUnread(t *testing.T) {
	g := &GPU{Index: 0, UUID: testGPU, Model: mig.H100_80GB, Err: errors.New("device 0 recovery action: boom")}
	st := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, NodeView{Obs: &Observation{GPUs: []*GPU{g}}}, testNow)
	if gs := st.GPUs[0]; gs.Mode != "" || gs.ModeSwitch != nil {
		t.Errorf("mode %q, switch %+v; want neither", gs.Mode, gs.ModeSwitch)
	}
	for _, err := range newStatusValidator(t).errors(t, st) {
		t.Errorf("the apiserver would refuse the status: %v", err)
	}
}

// A pending switch keeps its transition time while its target, phase and reason stay, so
// that an unchanged node renders an unchanged status (classify: no write); a switch that is
// new, to another target or for another GPU starts at now; one that took effect is gone.
func TestModeSwitchTransitionTime(t *testing.T) {
	earlier := metav1.NewTime(testNow.Add(-time.Hour))
	switching := func(model mig.Model) *Observation {
		return &Observation{GPUs: []*GPU{{Index: 0, UUID: testGPU, Model: model, MIGSupported: true, MIGMode: nvml.MIGEnabled, MIGModePending: true, Healthy: true}}}
	}
	old := func(uuid string, target slicerv1alpha1.GPUMode, reason slicerv1alpha1.GPUModeSwitchReason) slicerv1alpha1.NodeAcceleratorStatus {
		return slicerv1alpha1.NodeAcceleratorStatus{GPUs: []slicerv1alpha1.GPUStatus{{UUID: uuid, ModeSwitch: &slicerv1alpha1.GPUModeSwitch{
			TargetMode: target, Phase: slicerv1alpha1.GPUModeSwitchPending, Reason: reason, LastTransitionTime: earlier}}}}
	}
	for _, tc := range []struct {
		name  string
		old   slicerv1alpha1.NodeAcceleratorStatus
		obs   *Observation
		since time.Time
	}{
		{"unchanged", old(testGPU, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchResetRequired), switching(mig.A100_80GB), earlier.Time},
		{"new", slicerv1alpha1.NodeAcceleratorStatus{}, switching(mig.A100_80GB), testNow},
		{"another reason", old(testGPU, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchHeldByClient), switching(mig.A100_80GB), testNow},
		{"another target", old(testGPU, slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchHeldByClient), switching(mig.H100_80GB), testNow},
		{"another GPU's", old("GPU-1", slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchHeldByClient), switching(mig.H100_80GB), testNow},
	} {
		st := renderStatus(tc.old, 1, NodeView{Obs: tc.obs}, testNow)
		if sw := st.GPUs[0].ModeSwitch; sw == nil || !sw.LastTransitionTime.Time.Equal(tc.since) {
			t.Errorf("%s: switch %+v; want one since %s", tc.name, sw, tc.since)
		}
		again := renderStatus(st, 1, NodeView{Obs: tc.obs}, testNow.Add(time.Minute))
		if k := classify(st, again); k != changeNone {
			t.Errorf("%s: rendering the same node again is change %v; want none", tc.name, k)
		}
	}
	done := switching(mig.A100_80GB)
	done.GPUs[0].MIGModePending, done.GPUs[0].MIGMode = false, nvml.MIGDisabled
	st := renderStatus(old(testGPU, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchResetRequired), 1, NodeView{Obs: done}, testNow)
	if gs := st.GPUs[0]; gs.Mode != slicerv1alpha1.GPUModeWhole || gs.ModeSwitch != nil {
		t.Errorf("a switch that took effect: mode %q, switch %+v; want Whole and none", gs.Mode, gs.ModeSwitch)
	}
}

// The status check refuses what the CRD refuses (so that it passing above means something):
// a Switching GPU without its switch, a Whole GPU in MIG mode, a switch without a time.
func TestStatusValidatorRefuses(t *testing.T) {
	v := newStatusValidator(t)
	obs := &Observation{GPUs: []*GPU{
		{Index: 0, UUID: "GPU-0", Model: mig.A100_40GB, MIGSupported: true, MIGMode: nvml.MIGEnabled, MIGModePending: true, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: mig.H100_80GB, MIGSupported: true, MIGMode: nvml.MIGDisabled, Healthy: true},
	}}
	good := renderStatus(slicerv1alpha1.NodeAcceleratorStatus{}, 1, NodeView{Obs: obs}, testNow)
	if errs := v.errors(t, good); len(errs) != 0 {
		t.Fatalf("the rendered status is refused: %v", errs)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*slicerv1alpha1.NodeAcceleratorStatus)
		field  string
	}{
		{"Switching without modeSwitch", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].ModeSwitch = nil }, "status.gpus[0].modeSwitch"},
		{"Whole in MIG mode", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[1].MIGMode = slicerv1alpha1.MIGModeEnabled }, "status.gpus[1].mode"},
		{"switch to its own mode", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].ModeSwitch.TargetMode = slicerv1alpha1.GPUModeSwitching
		},
			"status.gpus[0].modeSwitch.targetMode"},
		{"a switch reason unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].ModeSwitch.Reason = "Busy" }, "status.gpus[0].modeSwitch.reason"},
	} {
		st := *good.DeepCopy()
		tc.mutate(&st)
		errs := v.errors(t, st)
		found := false
		for _, err := range errs {
			found = found || err.Field == tc.field
		}
		if !found {
			t.Errorf("%s: errors %v; want one at %s", tc.name, errs, tc.field)
		}
	}
}

// Through the emulated NVML: a change asked of an A100 waits for a GPU reset, one asked of a
// held H100 waits for the client, one asked of an idle H100 takes effect at once; the agent
// observes each, renders it (the pending switch keeping its time while it waits), and every
// status passes the CRD.
func TestModeFromEmulatedNVML(t *testing.T) {
	v := newStatusValidator(t)
	b, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A100_40GB, mig.H100_80GB, mig.H100_80GB}, MIGDisabled: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	var st slicerv1alpha1.NodeAcceleratorStatus
	step := func(name string, now time.Time, want ...wantMode) {
		t.Helper()
		obs, err := Observe(b, NewMetrics(nil))
		if err != nil {
			t.Fatalf("%s: observe: %v", name, err)
		}
		old := st
		st = renderStatus(old, 1, NodeView{Emulated: true, Obs: obs}, now)
		for i, w := range want {
			start := now
			if o := old.GPUs; len(o) > i && o[i].ModeSwitch != nil && w.target == o[i].ModeSwitch.TargetMode && w.reason == o[i].ModeSwitch.Reason {
				start = o[i].ModeSwitch.LastTransitionTime.Time
			}
			checkMode(t, name+": GPU "+string(rune('0'+i)), st.GPUs[i], w, start)
		}
		for _, err := range v.errors(t, st) {
			t.Errorf("%s: the apiserver would refuse the status: %v", name, err)
		}
	}
	dev := func(i int) nvml.Device {
		d, err := b.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	migMode := wantMode{migMode: slicerv1alpha1.MIGModeEnabled, mode: slicerv1alpha1.GPUModeMIG}
	wholeMode := wantMode{migMode: slicerv1alpha1.MIGModeDisabled, mode: slicerv1alpha1.GPUModeWhole, migOff: true}
	resetDue := wantMode{migMode: slicerv1alpha1.MIGModeEnabled, mode: slicerv1alpha1.GPUModeSwitching, target: slicerv1alpha1.GPUModeWhole,
		reason: slicerv1alpha1.GPUModeSwitchResetRequired, says: "after a GPU reset"}
	held := wantMode{migMode: slicerv1alpha1.MIGModeEnabled, mode: slicerv1alpha1.GPUModeSwitching, target: slicerv1alpha1.GPUModeWhole,
		reason: slicerv1alpha1.GPUModeSwitchHeldByClient, says: "once no client"}

	t0 := testNow
	step("as configured", t0, migMode, migMode, wholeMode)

	if a, err := dev(0).SetMIGMode(nvml.MIGDisabled); err != nil || a != nvml.ErrorResetRequired {
		t.Fatalf("A100 MIG off: %v, %v", a, err)
	}
	if err := b.HoldGPU(1, true); err != nil {
		t.Fatal(err)
	}
	if a, err := dev(1).SetMIGMode(nvml.MIGDisabled); err != nil || a != nvml.ErrorInUse {
		t.Fatalf("held H100 MIG off: %v, %v", a, err)
	}
	if a, err := dev(2).SetMIGMode(nvml.MIGEnabled); err != nil || a != nvml.Success {
		t.Fatalf("idle H100 MIG on: %v, %v", a, err)
	}
	t1 := t0.Add(time.Minute)
	step("asked", t1, resetDue, held, migMode)
	step("still waiting", t1.Add(time.Minute), resetDue, held, migMode)
	if sw := st.GPUs[0].ModeSwitch; sw == nil || !sw.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("a waiting switch: %+v; want one since %s", sw, t1)
	}

	if err := b.ResetGPU(1); !nvml.IsInUse(err) {
		t.Fatalf("reset of a held GPU: %v; want in use", err)
	}
	if err := b.HoldGPU(1, false); err != nil {
		t.Fatal(err)
	}
	if a, err := dev(1).SetMIGMode(nvml.MIGDisabled); err != nil || a != nvml.Success {
		t.Fatalf("released H100 MIG off: %v, %v", a, err)
	}
	if err := b.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	step("done", t1.Add(2*time.Minute), wholeMode, wholeMode, migMode)
	c := meta.FindStatusCondition(st.Conditions, slicerv1alpha1.ConditionMIGDisabled)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "GPU 0, GPU 1:") {
		t.Errorf("MIGDisabled %+v; want True naming GPU 0 and GPU 1", c)
	}
}
