package nvidia_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// The health watcher (engine.Health) over the real adapter on NVIDIA's mock, with the events
// and the recovery-action field nvidiamock delivers as the driver does: an application's XID
// is counted and changes nothing; an XID the driver confines to a MIG instance makes that
// instance unhealthy and not the GPU; an XID that breaks the GPU (with the GPU off the bus)
// makes the GPU unhealthy while the driver asks for a reset, and healthy once it no longer
// asks.
func TestHealthOnNVIDIAMock(t *testing.T) {
	lib, mock := mockLibrary(t, "A100-40GB")
	m := engine.NewMetrics(prometheus.NewRegistry())
	var changes atomic.Int64
	h := engine.NewHealth(func() { changes.Add(1) })
	h.Initialized()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Watch(ctx, lib, m, testr.New(t)) }()
	defer func() { cancel(); <-done }()
	dev := mock.Mock(0)
	waitFor(t, "the watcher to register the GPU's events", func() bool { return dev.Registered() == 1 })

	obs, g := observe(t, lib, m)
	slot := mig.Slot{GPU: g.UUID, Profile: "3g.20gb", Placement: mig.Placement{Start: 4, Size: 4}}
	s, err := obs.CreateSlice(slot, m)
	if err != nil {
		t.Fatal(err)
	}

	dev.RaiseXID(13, -1, -1, false)
	waitFor(t, "the application XID to be counted", func() bool {
		return testutil.ToFloat64(m.XIDs.WithLabelValues("0", "13", "application")) == 1
	})
	before := changes.Load()
	dev.RaiseXID(94, s.GI, s.CI, false)
	waitFor(t, "XID 94 to change health", func() bool { return changes.Load() > before })
	obs, g = observe(t, lib, m)
	h.Apply(obs)
	if !g.Healthy || len(g.Slices) != 1 || !strings.Contains(g.Slices[0].Unhealthy, "XID 94") {
		t.Fatalf("after XID 94 in GPU instance %d: GPU healthy %v, slices %+v", s.GI, g.Healthy, g.Slices)
	}

	before = changes.Load()
	dev.RaiseXID(79, -1, -1, true)
	dev.SetRecoveryAction(gonvml.GPU_RECOVERY_ACTION_GPU_RESET)
	waitFor(t, "XID 79 to change health", func() bool { return changes.Load() > before })
	obs, g = observe(t, lib, m)
	h.Apply(obs)
	if g.Healthy || g.Recovery != nvml.RecoveryGPUReset || !strings.Contains(g.Unusable(), "reset") {
		t.Fatalf("after XID 79: GPU healthy %v, recovery %v (%s)", g.Healthy, g.Recovery, g.Unusable())
	}
	if n := testutil.ToFloat64(m.XIDs.WithLabelValues("0", "79", "gpu")); n != 1 {
		t.Fatalf("XID 79 counted %v times", n)
	}

	before = changes.Load()
	dev.SetRecoveryAction(gonvml.GPU_RECOVERY_ACTION_NONE)
	waitFor(t, "the reset to change health", func() bool { return changes.Load() > before })
	obs, g = observe(t, lib, m)
	h.Apply(obs)
	if !g.Healthy {
		t.Fatalf("after the reset the GPU is still unhealthy: %s", g.Unusable())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
