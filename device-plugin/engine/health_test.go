package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

func TestClassifyXID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		xid     uint64
		gi, ci  uint32
		want    XIDScope
		comment string
	}{
		{"graphics engine exception", 13, nvml.NoInstance, nvml.NoInstance, XIDApplication, ""},
		{"GPU memory page fault", 31, nvml.NoInstance, nvml.NoInstance, XIDApplication, ""},
		{"an application fault in an instance", 43, 1, 0, XIDApplication, ""},
		{"context switch timeout", 109, nvml.NoInstance, nvml.NoInstance, XIDApplication, ""},
		{"fallen off the bus", 79, nvml.NoInstance, nvml.NoInstance, XIDGPU, ""},
		{"double-bit ECC error", 48, nvml.NoInstance, nvml.NoInstance, XIDGPU, ""},
		{"contained memory error in an instance", 94, 3, 0, XIDInstance, ""},
		{"uncontained memory error in an instance", 95, 3, 0, XIDInstance, ""},
		{"an instance id without a compute instance id names no MIG device", 94, 3, nvml.NoInstance, XIDGPU, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyXID(nvml.Event{Type: nvml.EventXidCriticalError, Data: tc.xid, GPUInstanceID: tc.gi, ComputeInstanceID: tc.ci}); got != tc.want {
				t.Fatalf("ClassifyXID(%d) = %s, want %s", tc.xid, got, tc.want)
			}
		})
	}
}

// waitChanged waits for the health book to report a change, and observes the node after it.
func observeAfter(t *testing.T, b *emulated.Backend, h *Health, changes *atomic.Int64, from int64) *Observation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for changes.Load() == from {
		if time.Now().After(deadline) {
			t.Fatal("no health change reported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	obs, err := Observe(b, NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	h.Apply(obs)
	return obs
}

// The watcher registers every GPU, and the events reach the observation: an application's
// XID changes nothing; an XID in a MIG instance makes that instance unhealthy until it is
// destroyed; one that breaks the GPU makes the GPU unhealthy while the driver asks for a reset
// and until the reset (the recovery action back to none); XIDs are counted by GPU, code and
// scope. An event set that fails is made again.
func TestHealthWatch(t *testing.T) {
	b, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	var changes atomic.Int64
	h := NewHealth(func() { changes.Add(1) })
	h.Initialized()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Watch(ctx, b, m, testr.New(t)) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for b.Calls(emulated.OpRegisterEvents) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not register both GPUs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	uuid, err := b.CreateInstance(0, "3g.40gb", 4, false)
	if err != nil {
		t.Fatal(err)
	}
	gi := b.Instances()[0].GPUInstance

	// An application's fault: counted, nothing unhealthy.
	before := changes.Load()
	if err := b.RaiseXID(emulated.XID{GPU: 1, GPUInstance: -1, Code: 31}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.XIDs.WithLabelValues("1", "31", "application")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the application XID was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if changes.Load() != before {
		t.Fatal("an application XID changed health")
	}

	// A contained memory error in the instance: that instance only.
	before = changes.Load()
	if err := b.RaiseXID(emulated.XID{GPU: 0, GPUInstance: gi, Code: 94}); err != nil {
		t.Fatal(err)
	}
	obs := observeAfter(t, b, h, &changes, before)
	if !obs.GPUs[0].Healthy || !strings.Contains(obs.GPUs[0].Slices[0].Unhealthy, "XID 94") {
		t.Fatalf("after XID 94 in the instance: GPU healthy %v, slice %q", obs.GPUs[0].Healthy, obs.GPUs[0].Slices[0].Unhealthy)
	}
	// Destroyed and made again: the new instance is healthy.
	if err := obs.DestroySlice(obs.GPUs[0].Slices[0], m); err != nil {
		t.Fatal(err)
	}
	obs, _ = Observe(b, m)
	h.Apply(obs)
	if _, err := b.CreateInstance(0, "3g.40gb", 4, false); err != nil {
		t.Fatal(err)
	}
	obs, _ = Observe(b, m)
	h.Apply(obs)
	if s := obs.GPUs[0].Slices[0]; s.Unhealthy != "" || s.MIGUUID == uuid {
		t.Fatalf("the instance made again: %+v", s)
	}

	// The GPU falls off the bus: unhealthy while the driver asks for a reset, healthy after.
	before = changes.Load()
	if err := b.RaiseXID(emulated.XID{GPU: 1, GPUInstance: -1, Code: 79, Action: nvml.RecoveryGPUReset, Unavailable: true}); err != nil {
		t.Fatal(err)
	}
	obs = observeAfter(t, b, h, &changes, before)
	if obs.GPUs[1].Healthy || !strings.Contains(obs.GPUs[1].Unusable(), "reset") {
		t.Fatalf("after XID 79: GPU 1 healthy %v (%s)", obs.GPUs[1].Healthy, obs.GPUs[1].Unusable())
	}
	if !obs.GPUs[0].Healthy {
		t.Fatal("GPU 0 was made unhealthy by GPU 1's XID")
	}
	if n := testutil.ToFloat64(m.XIDs.WithLabelValues("1", "79", "gpu")); n != 1 {
		t.Fatalf("XID 79 counted %v times", n)
	}
	before = changes.Load()
	if err := b.Recover(1); err != nil {
		t.Fatal(err)
	}
	obs = observeAfter(t, b, h, &changes, before)
	if !obs.GPUs[1].Healthy {
		t.Fatalf("after the reset GPU 1 is still unhealthy: %s", obs.GPUs[1].Unusable())
	}

	// An XID that breaks the GPU with no recovery action reported stays until the agent
	// restarts (a new book), as NVIDIA's device plugin keeps it.
	before = changes.Load()
	if err := b.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 48}); err != nil {
		t.Fatal(err)
	}
	obs = observeAfter(t, b, h, &changes, before)
	if obs.GPUs[0].Healthy || !strings.Contains(obs.GPUs[0].Unusable(), "XID 48") {
		t.Fatalf("after XID 48: %s", obs.GPUs[0].Unusable())
	}
	obs, _ = Observe(b, m)
	h.Apply(obs)
	if obs.GPUs[0].Healthy {
		t.Fatal("XID 48 was forgotten by the next observation")
	}

	// The event set fails: a new one is made and the GPUs registered again.
	regs := b.Calls(emulated.OpRegisterEvents)
	b.InjectFault(emulated.OpEventSetWait, nvml.ErrorUnknown, 1)
	deadline = time.Now().Add(20 * time.Second)
	for b.Calls(emulated.OpRegisterEvents) < regs+2 {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not register the GPUs again after its event set failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A GPU whose events cannot be registered is unhealthy (nothing would tell its XIDs) until a
// registration works.
func TestHealthRegistrationFailure(t *testing.T) {
	b, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A30_24GB}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	b.InjectFault(emulated.OpRegisterEvents, nvml.ErrorUnknown, 1)
	var changes atomic.Int64
	h := NewHealth(func() { changes.Add(1) })
	h.Initialized()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Watch(ctx, b, NewMetrics(nil), testr.New(t)) }()
	defer func() { cancel(); <-done }()
	obs := observeAfter(t, b, h, &changes, 0)
	if obs.GPUs[0].Healthy || !strings.Contains(obs.GPUs[0].Unusable(), "cannot be registered") {
		t.Fatalf("GPU whose events cannot be registered: %s", obs.GPUs[0].Unusable())
	}
	obs = observeAfter(t, b, h, &changes, 1)
	if !obs.GPUs[0].Healthy {
		t.Fatalf("after a registration that works: %s", obs.GPUs[0].Unusable())
	}
}

// Each holder is told once per reason; healthy again, it is forgotten and told anew next time.
func TestToldOncePerReason(t *testing.T) {
	told := Told{}
	if got := told.Pass(map[types.UID]string{"a": "XID 79", "b": ""}); len(got) != 1 || got[0] != "a" {
		t.Fatalf("first pass tells %v", got)
	}
	if got := told.Pass(map[types.UID]string{"a": "XID 79"}); len(got) != 0 {
		t.Fatalf("the same reason told again: %v", got)
	}
	if got := told.Pass(map[types.UID]string{"a": "the driver asks for a GPU reset"}); len(got) != 1 {
		t.Fatalf("a new reason not told: %v", got)
	}
	told.Pass(map[types.UID]string{"a": ""})
	if got := told.Pass(map[types.UID]string{"a": "XID 79"}); len(got) != 1 {
		t.Fatalf("unhealthy again after recovering, not told: %v", got)
	}
}

// The watcher calls nothing before the frontend has initialised NVML: the real library
// crashes the process on a call when libnvidia-ml was never loaded (a node without a driver).
func TestHealthWaitsForInitialized(t *testing.T) {
	b, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A30_24GB}})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHealth(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Watch(ctx, b, NewMetrics(nil), testr.New(t)) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond)
	for _, op := range emulated.Ops() {
		if n := b.Calls(op); n != 0 {
			t.Fatalf("%s called %d times before NVML was initialised", op, n)
		}
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	h.Initialized()
	deadline := time.Now().Add(10 * time.Second)
	for b.Calls(emulated.OpRegisterEvents) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not start once NVML was initialised")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
