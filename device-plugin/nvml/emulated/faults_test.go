package emulated_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Every call of an observation, a create and a destroy goes through the fault machinery
// (each is counted under a name Ops lists), and a fault fails exactly the next call of its
// operation, changing nothing.
func TestEveryCallCanFail(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}})
	m := engine.NewMetrics(nil)
	obs, err := engine.Observe(b, m)
	if err != nil {
		t.Fatal(err)
	}
	slot := mig.Slot{GPU: emulated.GPUUUID("n1", 0), Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}
	s, err := obs.CreateSlice(slot, m)
	if err != nil {
		t.Fatal(err)
	}
	if obs, err = engine.Observe(b, m); err != nil {
		t.Fatal(err)
	}
	if err := obs.DestroySlice(obs.GPUs[0].Slices[0], m); err != nil {
		t.Fatalf("destroy %v: %v", s, err)
	}
	for _, op := range emulated.Ops() {
		if op == emulated.OpPossiblePlacements || op == emulated.OpInit || !isMIGOrQuery(op) {
			continue
		}
		if b.Calls(op) == 0 {
			t.Errorf("%s was not called by an observe, create and destroy", op)
		}
	}
	// One fault: the next call of the operation fails, the one after works.
	b.InjectFault(emulated.OpMIGMode, nvml.ErrorGPUIsLost, 1)
	if obs, err := engine.Observe(b, m); err != nil || nvml.ReturnOf(obs.GPUs[0].Err) != nvml.ErrorGPUIsLost {
		t.Errorf("observe with a fault on %s: %v, GPU error %v", emulated.OpMIGMode, err, obs.GPUs[0].Err)
	}
	if obs, err := engine.Observe(b, m); err != nil || obs.GPUs[0].Err != nil {
		t.Errorf("the observation after the fault: %v, GPU error %v", err, obs.GPUs[0].Err)
	}
	b.InjectFault(emulated.OpCreateGPUInstance, nvml.ErrorInsufficientResource, 1)
	if _, err := obs.CreateSlice(slot, m); !nvml.IsInsufficientResources(err) || len(b.Instances()) != 0 || b.FaultsLeft(emulated.OpCreateGPUInstance) != 0 {
		t.Errorf("create with a fault: %v, instances %v", err, b.Instances())
	}
}

func isMIGOrQuery(op string) bool {
	switch op {
	case emulated.OpEventSetCreate, emulated.OpEventSetWait, emulated.OpRegisterEvents, emulated.OpSupportedEventTypes, emulated.OpRecoveryAction:
		return false
	}
	return true
}

// A slow call takes its delay; a policy faults calls nothing is queued for.
func TestSlowCallsAndPolicy(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.A30_24GB}})
	b.InjectSlow(emulated.OpDeviceCount, 50*time.Millisecond, 1)
	start := time.Now()
	if _, err := b.DeviceCount(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("slow call took %s", d)
	}
	b.SetFaultPolicy(func(op string) emulated.Fault {
		if op == emulated.OpDriverVersion {
			return emulated.Fault{Return: nvml.ErrorDriverNotLoaded}
		}
		return emulated.Fault{}
	})
	if _, err := b.DriverVersion(); !nvml.IsDriverUnavailable(err) {
		t.Errorf("policy fault: %v", err)
	}
	if _, err := b.DeviceCount(); err != nil {
		t.Errorf("policy faulted another call: %v", err)
	}
	b.SetFaultPolicy(nil)
	if _, err := b.DriverVersion(); err != nil {
		t.Errorf("after the policy is removed: %v", err)
	}
}

// A crash point lets its call finish (the state file has it), then the backend is dead: its
// calls fail and change nothing; a new backend on the state file (the restarted process)
// sees the state at the crash.
func TestCrashAfter(t *testing.T) {
	opts := emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}, StateFile: filepath.Join(t.TempDir(), "nvml.json")}
	b := newBackend(t, opts)
	killed := false
	b.CrashAfter(emulated.OpCreateGPUInstance, 1, func() { killed = true })
	m := engine.NewMetrics(nil)
	obs, err := engine.Observe(b, m)
	if err != nil {
		t.Fatal(err)
	}
	_, err = obs.CreateSlice(mig.Slot{GPU: emulated.GPUUUID("n1", 0), Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}, m)
	if err == nil || !killed || !b.Crashed() {
		t.Fatalf("create through the crash point: %v, killed %v", err, killed)
	}
	if _, err := b.CreateInstance(0, "1g.10gb", 0, false); err != nil {
		t.Fatal(err) // the test's own helper still works in memory; the dead backend saves nothing
	}
	restarted := newBackend(t, opts)
	in := restarted.Instances()
	if len(in) != 1 || in[0].Profile != "3g.40gb" || in[0].ComputeInstance != -1 {
		t.Fatalf("after the crash the state file has %+v, want one bare 3g.40gb GPU instance", in)
	}
	if _, err := b.DeviceCount(); err == nil {
		t.Fatal("a call of the killed backend succeeded")
	}
}
