package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The mode gauges say what the status says: GPUs by mode, one series per GPU with a switch
// not done, gone once it is done.
func TestRecordModes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	E, D := nvml.MIGEnabled, nvml.MIGDisabled
	gpu := func(i int, m mig.Model, cur, pend nvml.MIGMode) *GPU {
		return &GPU{Index: i, UUID: testGPUOf(i), Model: m, MIGSupported: true, MIGMode: cur, MIGModePending: cur != pend, Healthy: true}
	}
	obs := &Observation{GPUs: []*GPU{
		gpu(0, mig.H100_80GB, E, E), // Whole asked, held by an allocation: MIG, pending
		gpu(1, mig.A100_80GB, E, D), // pending a reset: switching
		gpu(2, mig.H100_80GB, D, D),
		{Index: 3, UUID: testGPUOf(3), ProductName: "NVIDIA T4", Healthy: true}, // no MIG: whole
		{Index: 4, UUID: testGPUOf(4), Err: nvml.NewError("DeviceGetMigMode", nvml.ErrorUnknown, "")},
	}}
	reports := map[string]*ModeReport{testGPUOf(0): {TargetMode: slicerv1alpha1.GPUModeWhole, Phase: slicerv1alpha1.GPUModeSwitchPending, Reason: slicerv1alpha1.GPUModeSwitchHeldByClient}}
	m.RecordModes(obs, reports)
	modes := func() map[string]float64 {
		out := map[string]float64{}
		for _, l := range []string{"whole", "mig", "switching"} {
			out[l] = testutil.ToFloat64(m.GPUModes.WithLabelValues(l))
		}
		return out
	}
	if diff := cmp.Diff(map[string]float64{"whole": 2, "mig": 1, "switching": 1}, modes()); diff != "" {
		t.Errorf("GPUs by mode (GPU 4's mode was not read) (-want +got):\n%s", diff)
	}
	if n := testutil.CollectAndCount(m.ModeSwitch); n != 2 {
		t.Errorf("mode switch series = %d, want 2", n)
	}
	if v := testutil.ToFloat64(m.ModeSwitch.WithLabelValues("0", "whole", "pending", "held_by_client")); v != 1 {
		t.Errorf("GPU 0's switch = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.ModeSwitch.WithLabelValues("1", "whole", "pending", "reset_required")); v != 1 {
		t.Errorf("GPU 1's switch = %v, want 1", v)
	}
	m.ModeSwitchCalled(obs.GPUs[2], ModeStep{Set: true, Target: nvml.MIGEnabled}, nil)
	m.ModeSwitchDuration.WithLabelValues("mig").Observe(1)
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	// GPU 0 turns whole, GPU 1 is reset: no switch left.
	obs.GPUs[0].MIGMode = D
	obs.GPUs[1].MIGMode, obs.GPUs[1].MIGModePending = D, false
	m.RecordModes(obs, nil)
	if diff := cmp.Diff(map[string]float64{"whole": 4, "mig": 0, "switching": 0}, modes()); diff != "" {
		t.Errorf("GPUs by mode after the switches (-want +got):\n%s", diff)
	}
	if n := testutil.CollectAndCount(m.ModeSwitch); n != 0 {
		t.Errorf("mode switch series after the switches = %d, want 0", n)
	}
}

func testGPUOf(i int) string { return fmt.Sprintf("GPU-%d", i) }

// A switch the written status showed pending is timed once, from its lastTransitionTime,
// when the status the writer next writes shows it done, even when a SetMIGMode call of that
// pass did it; a restarted agent (a new writer) times it the same way. A switch done at once,
// never shown pending, is timed by its call.
func TestStatusWriterTimesModeSwitches(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := slicerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&slicerv1alpha1.NodeAccelerator{}).Build()
	m := NewMetrics(prometheus.NewRegistry())
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	w := NewStatusWriter(c, nil, "n1", -1, clock).WithMetrics(m)
	a100 := &GPU{Index: 0, UUID: testGPUOf(0), Model: mig.A100_80GB, ProductName: "NVIDIA A100-SXM4-80GB", MIGSupported: true, MIGMode: nvml.MIGEnabled, MIGModePending: true, Healthy: true}
	h100 := &GPU{Index: 1, UUID: testGPUOf(1), Model: mig.H100_80GB, ProductName: "NVIDIA H100 80GB HBM3", MIGSupported: true, MIGMode: nvml.MIGEnabled, Healthy: true}
	obs := &Observation{GPUs: []*GPU{a100, h100}}
	ctx := context.Background()
	publish := func(done map[string]time.Duration) {
		t.Helper()
		if _, err := w.Publish(ctx, NodeView{Obs: obs, ModeSwitchesDone: done}); err != nil {
			t.Fatal(err)
		}
	}
	timed := func(target string) (uint64, float64) {
		t.Helper()
		var h dto.Metric
		if err := m.ModeSwitchDuration.WithLabelValues(target).(prometheus.Histogram).Write(&h); err != nil {
			t.Fatal(err)
		}
		return h.GetHistogram().GetSampleCount(), h.GetHistogram().GetSampleSum()
	}
	publish(nil) // the A100 Switching to Whole, ResetRequired, since 1000
	now = now.Add(90 * time.Second)
	publish(nil) // unchanged
	if n, _ := timed("whole"); n != 0 {
		t.Fatalf("a pending switch was timed: %d", n)
	}
	// The agent restarts; the A100 was reset meanwhile, and the H100 switched off by a call of
	// 2 s (done at once: its status never showed it pending).
	w = NewStatusWriter(c, nil, "n1", -1, clock).WithMetrics(m)
	now = now.Add(30 * time.Second)
	a100.MIGMode, a100.MIGModePending = nvml.MIGDisabled, false
	h100.MIGMode = nvml.MIGDisabled
	publish(map[string]time.Duration{h100.UUID: 2 * time.Second})
	publish(nil)
	if n, sum := timed("whole"); n != 2 || sum != 122 {
		t.Errorf("switches to whole timed %d times, %v s in all; want twice, 120 s (the A100) + 2 s (the H100)", n, sum)
	}
	// The H100 back to MIG: held (pending) for a minute, then done by a call of 1 s: timed once,
	// the minute.
	h100.MIGModePending = true
	publish(nil)
	now = now.Add(time.Minute)
	h100.MIGMode, h100.MIGModePending = nvml.MIGEnabled, false
	publish(map[string]time.Duration{h100.UUID: time.Second})
	if n, sum := timed("mig"); n != 1 || sum != 60 {
		t.Errorf("switches to mig timed %d times, %v s in all; want once, 60 s", n, sum)
	}
}
