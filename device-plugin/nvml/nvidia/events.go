package nvidia

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// The event and recovery-action calls of the health watcher (device-plugin/engine/health.go).

// EventSetCreate implements nvml.Library.
func (l *Library) EventSetCreate() (nvml.EventSet, error) {
	s, r := l.lib.EventSetCreate()
	if err := wrap("EventSetCreate", r); err != nil {
		return nil, err
	}
	return &eventSet{s: s}, nil
}

type eventSet struct{ s gonvml.EventSet }

func (e *eventSet) Wait(timeout time.Duration) (nvml.Event, error) {
	ms := uint32(min(timeout.Milliseconds(), math.MaxUint32))
	d, r := e.s.Wait(ms)
	if err := wrap("EventSetWait", r); err != nil {
		return nvml.Event{}, err
	}
	ev := nvml.Event{Type: d.EventType, Data: d.EventData, GPUInstanceID: d.GpuInstanceId, ComputeInstanceID: d.ComputeInstanceId}
	if d.Device != nil {
		ev.Device = &device{d: d.Device}
	}
	return ev, nil
}

func (e *eventSet) Free() error { return wrap("EventSetFree", e.s.Free()) }

func (d *device) SupportedEventTypes() (uint64, error) {
	t, r := d.d.GetSupportedEventTypes()
	return t, wrap("DeviceGetSupportedEventTypes", r)
}

func (d *device) RegisterEvents(mask uint64, set nvml.EventSet) error {
	es, ok := set.(*eventSet)
	if !ok {
		return nvml.NewError("DeviceRegisterEvents", nvml.ErrorInvalidArgument, fmt.Sprintf("event set %T is not NVML's", set))
	}
	return wrap("DeviceRegisterEvents", d.d.RegisterEvents(mask, es.s))
}

func (d *device) RecoveryAction() (nvml.RecoveryAction, error) {
	const op = "DeviceGetFieldValues"
	vals := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if err := wrap(op, d.d.GetFieldValues(vals)); err != nil {
		return nvml.RecoveryNone, err
	}
	if err := wrap(op, gonvml.Return(vals[0].NvmlReturn)); err != nil {
		return nvml.RecoveryNone, err
	}
	v, err := fieldInt(vals[0])
	if err != nil {
		return nvml.RecoveryNone, nvml.NewError(op, nvml.ErrorUnknown, err.Error())
	}
	return nvml.RecoveryAction(v), nil
}

// fieldInt reads an integer field value (nvmlValue_t, a little-endian union) by its type.
func fieldInt(f gonvml.FieldValue) (int64, error) {
	b := f.Value[:]
	switch gonvml.ValueType(f.ValueType) {
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return int64(binary.LittleEndian.Uint32(b)), nil
	case gonvml.VALUE_TYPE_SIGNED_INT:
		return int64(int32(binary.LittleEndian.Uint32(b))), nil
	case gonvml.VALUE_TYPE_UNSIGNED_SHORT:
		return int64(binary.LittleEndian.Uint16(b)), nil
	case gonvml.VALUE_TYPE_UNSIGNED_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, gonvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return int64(binary.LittleEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("field %d has value type %d, not an integer", f.FieldId, f.ValueType)
}
