package nvidia

import (
	"encoding/binary"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// The event calls and the recovery-action field go through go-nvml as NVML defines them:
// the adapter registers the mask it is given on the set it created, hands back the events
// go-nvml's Wait returns (the GPU, the XID, the instance ids), maps a timeout to ERROR_TIMEOUT
// and reads the recovery action out of the field value's union by its type.
func TestEventsOverGoNVMLMock(t *testing.T) {
	gpu := &mock.Device{GetUUIDFunc: func() (string, gonvml.Return) { return "GPU-1", gonvml.SUCCESS }}
	var registered uint64
	var waits int
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (gonvml.EventData, gonvml.Return) {
			waits++
			if ms != 250 {
				t.Errorf("Wait(%d ms), want 250", ms)
			}
			if waits == 1 {
				return gonvml.EventData{Device: gpu, EventType: gonvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 3, ComputeInstanceId: 0}, gonvml.SUCCESS
			}
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		},
		FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
	}
	gpu.RegisterEventsFunc = func(mask uint64, s gonvml.EventSet) gonvml.Return {
		if s != set {
			t.Errorf("registered on %v, want the created set", s)
		}
		registered = mask
		return gonvml.SUCCESS
	}
	gpu.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) {
		return gonvml.EventTypeXidCriticalError | gonvml.EventTypeGpuRecoveryAction, gonvml.SUCCESS
	}
	action := uint32(gonvml.GPU_RECOVERY_ACTION_GPU_RESET)
	gpu.GetFieldValuesFunc = func(vals []gonvml.FieldValue) gonvml.Return {
		if len(vals) != 1 || vals[0].FieldId != gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
			t.Fatalf("field values %+v", vals)
		}
		vals[0].ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_INT)
		binary.LittleEndian.PutUint32(vals[0].Value[:], action)
		return gonvml.SUCCESS
	}
	lib := &Library{lib: &mock.Interface{EventSetCreateFunc: func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS }}}
	dev := &device{d: gpu}

	es, err := lib.EventSetCreate()
	if err != nil {
		t.Fatal(err)
	}
	if mask, err := dev.SupportedEventTypes(); err != nil || mask != nvml.EventXidCriticalError|nvml.EventGPURecoveryAction {
		t.Fatalf("supported event types %#x, %v", mask, err)
	}
	if err := dev.RegisterEvents(nvml.EventXidCriticalError, es); err != nil || registered != nvml.EventXidCriticalError {
		t.Fatalf("register: %v, mask %#x", err, registered)
	}
	ev, err := es.Wait(250 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != nvml.EventXidCriticalError || ev.Data != 94 || ev.GPUInstanceID != 3 || ev.ComputeInstanceID != 0 {
		t.Fatalf("event %+v", ev)
	}
	if uuid, err := ev.Device.UUID(); err != nil || uuid != "GPU-1" {
		t.Fatalf("event's device: %q, %v", uuid, err)
	}
	if _, err := es.Wait(250 * time.Millisecond); !nvml.IsTimeout(err) {
		t.Fatalf("second wait: %v, want ERROR_TIMEOUT", err)
	}
	if a, err := dev.RecoveryAction(); err != nil || a != nvml.RecoveryGPUReset {
		t.Fatalf("recovery action %v, %v", a, err)
	}
	gpu.GetFieldValuesFunc = func(vals []gonvml.FieldValue) gonvml.Return {
		vals[0].NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
		return gonvml.SUCCESS
	}
	if _, err := dev.RecoveryAction(); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
		t.Fatalf("recovery action on a driver without the field: %v, want ERROR_NOT_SUPPORTED", err)
	}
	if err := es.Free(); err != nil {
		t.Fatal(err)
	}
}
