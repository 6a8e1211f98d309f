package emulated_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
)

// An XID reaches the event sets its GPU registered it in, naming the instance it happened
// in; the recovery action it asks for is what the GPU reports until Recover, survives a
// process restart (state file) and goes with a reboot.
func TestEvents(t *testing.T) {
	state := filepath.Join(t.TempDir(), "nvml.json")
	opts := emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}, StateFile: state}
	b := newBackend(t, opts)
	set, err := b.EventSetCreate()
	if err != nil {
		t.Fatal(err)
	}
	gpu0, _ := b.Device(0)
	gpu1, _ := b.Device(1)
	if mask, err := gpu0.SupportedEventTypes(); err != nil || mask&nvml.EventXidCriticalError == 0 {
		t.Fatalf("supported events %#x, %v", mask, err)
	}
	if err := gpu0.RegisterEvents(nvml.EventXidCriticalError|nvml.EventGPURecoveryAction, set); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInstance(0, "1g.10gb", 3, false); err != nil {
		t.Fatal(err)
	}
	gi := b.Instances()[0].GPUInstance

	// GPU 1 did not register: its XID is not delivered.
	if err := b.RaiseXID(emulated.XID{GPU: 1, GPUInstance: -1, Code: 48, Action: nvml.RecoveryGPUReset}); err != nil {
		t.Fatal(err)
	}
	if err := b.RaiseXID(emulated.XID{GPU: 0, GPUInstance: gi, Code: 94}); err != nil {
		t.Fatal(err)
	}
	ev, err := set.Wait(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	uuid, _ := ev.Device.UUID()
	if ev.Type != nvml.EventXidCriticalError || ev.Data != 94 || ev.GPUInstanceID != uint32(gi) || ev.ComputeInstanceID != 0 || uuid != emulated.GPUUUID("n1", 0) {
		t.Fatalf("event %+v on %s", ev, uuid)
	}
	if _, err := set.Wait(10 * time.Millisecond); !nvml.IsTimeout(err) {
		t.Fatalf("GPU 1's XID was delivered to a set it is not registered in: %v", err)
	}
	if a, _ := gpu1.RecoveryAction(); a != nvml.RecoveryGPUReset {
		t.Fatalf("GPU 1's recovery action %v, want GPU reset", a)
	}

	// A GPU-wide XID that asks for a reset: the XID, then the recovery action's change.
	if err := b.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 79, Action: nvml.RecoveryGPUReset}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []nvml.Event{
		{Type: nvml.EventXidCriticalError, Data: 79, GPUInstanceID: nvml.NoInstance, ComputeInstanceID: nvml.NoInstance},
		{Type: nvml.EventGPURecoveryAction, Data: uint64(nvml.RecoveryGPUReset), GPUInstanceID: nvml.NoInstance, ComputeInstanceID: nvml.NoInstance},
	} {
		ev, err := set.Wait(time.Second)
		ev.Device = nil
		if err != nil || ev != want {
			t.Fatalf("event %+v, %v; want %+v", ev, err, want)
		}
	}
	again := newBackend(t, opts) // a process restart keeps what the driver reports
	d, _ := again.Device(0)
	if a, _ := d.RecoveryAction(); a != nvml.RecoveryGPUReset {
		t.Fatalf("after a restart: recovery action %v", a)
	}
	if err := b.Recover(0); err != nil {
		t.Fatal(err)
	}
	if ev, err := set.Wait(time.Second); err != nil || ev.Type != nvml.EventGPURecoveryAction || ev.Data != uint64(nvml.RecoveryNone) {
		t.Fatalf("recovery event %+v, %v", ev, err)
	}
	if a, _ := gpu0.RecoveryAction(); a != nvml.RecoveryNone {
		t.Fatalf("recovered GPU's action %v", a)
	}
	if err := b.Reboot(); err != nil {
		t.Fatal(err)
	}
	if a, _ := gpu1.RecoveryAction(); a != nvml.RecoveryNone {
		t.Fatalf("after a reboot GPU 1's action is %v", a)
	}
	if err := b.RaiseXID(emulated.XID{GPU: 0, GPUInstance: 5, Code: 94}); err == nil {
		t.Fatal("an XID in a GPU instance that does not exist was raised")
	}
	if err := set.Free(); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Wait(time.Millisecond); err == nil {
		t.Fatal("wait on a freed set succeeded")
	}
}

// A control file written next to the state file (what e2e writes on the node) raises its XIDs
// and recovers its GPUs at the backend's next event wait, once.
func TestControlFile(t *testing.T) {
	state := filepath.Join(t.TempDir(), "nvml.json")
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}, StateFile: state})
	set, err := b.EventSetCreate()
	if err != nil {
		t.Fatal(err)
	}
	gpu, _ := b.Device(0)
	if err := gpu.RegisterEvents(nvml.EventXidCriticalError|nvml.EventGPURecoveryAction, set); err != nil {
		t.Fatal(err)
	}
	if err := emulated.SendControl(state, emulated.Control{XIDs: []emulated.ControlXID{{GPU: 0, XID: 79, RecoveryAction: nvml.RecoveryNodeReboot}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := set.Wait(2 * time.Second)
	if err != nil || ev.Type != nvml.EventXidCriticalError || ev.Data != 79 || ev.GPUInstanceID != nvml.NoInstance {
		t.Fatalf("event %+v, %v", ev, err)
	}
	if emulated.ControlPending(state) {
		t.Fatal("the control file is still there once applied")
	}
	if a, _ := gpu.RecoveryAction(); a != nvml.RecoveryNodeReboot {
		t.Fatalf("recovery action %v", a)
	}
	if err := emulated.SendControl(state, emulated.Control{Recover: []int{0}}); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := set.Wait(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == nvml.EventGPURecoveryAction && ev.Data == uint64(nvml.RecoveryNone) {
			break
		}
	}
}
