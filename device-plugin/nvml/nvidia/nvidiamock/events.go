package nvidiamock

import (
	"encoding/binary"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// NVML's events and the recovery-action field as the driver delivers them (nvml.h:
// nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlDeviceGetFieldValues
// with NVML_FI_DEV_GET_GPU_RECOVERY_ACTION). go-nvml's mock has none of them (its calls panic),
// so that the health watcher (device-plugin/engine/health.go) could not run over the adapter.
// A test raises what a failing GPU would: RaiseXID, SetRecoveryAction.

// SupportedEvents are the event types the mock's driver delivers (GetSupportedEventTypes).
const SupportedEvents = gonvml.EventTypeXidCriticalError | gonvml.EventTypeGpuUnavailableError | gonvml.EventTypeGpuRecoveryAction

// noInstance is what an event carries for "no GPU or compute instance" (nvmlEventData_t).
const noInstance = 0xFFFFFFFF

// deviceEvents is a device's registrations and recovery action (guarded by Device.mu).
type deviceEvents struct {
	regs     []registration
	recovery uint32
}

type registration struct {
	set  *EventSet
	mask uint64
}

// EventSet is an event set of the mock's driver: events queue until Wait takes them.
type EventSet struct {
	gonvml.EventSet // go-nvml's mock: the calls the driver's event set has and this one lacks panic

	mu     sync.Mutex
	queue  []gonvml.EventData
	freed  bool
	notify chan struct{}
}

// EventSetCreate returns an empty event set.
func (l *Library) EventSetCreate() (gonvml.EventSet, gonvml.Return) {
	return &EventSet{EventSet: &mock.EventSet{}, notify: make(chan struct{}, 1)}, gonvml.SUCCESS
}

// Wait returns the next queued event, or ERROR_TIMEOUT after ms milliseconds without one.
func (s *EventSet) Wait(ms uint32) (gonvml.EventData, gonvml.Return) {
	deadline := time.After(time.Duration(ms) * time.Millisecond)
	for {
		s.mu.Lock()
		switch {
		case s.freed:
			s.mu.Unlock()
			return gonvml.EventData{}, gonvml.ERROR_UNINITIALIZED
		case len(s.queue) > 0:
			ev := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, gonvml.SUCCESS
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-deadline:
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		}
	}
}

// Free releases the set; its registrations deliver nothing more.
func (s *EventSet) Free() gonvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freed = true
	s.queue = nil
	return gonvml.SUCCESS
}

func (s *EventSet) deliver(ev gonvml.EventData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return
	}
	s.queue = append(s.queue, ev)
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// GetSupportedEventTypes is SupportedEvents.
func (d *Device) GetSupportedEventTypes() (uint64, gonvml.Return) {
	return SupportedEvents, gonvml.SUCCESS
}

// RegisterEvents delivers the device's events of the types in mask to set, which must be one
// EventSetCreate made: ERROR_INVALID_ARGUMENT otherwise, ERROR_NOT_SUPPORTED for a type the
// driver does not deliver.
func (d *Device) RegisterEvents(mask uint64, set gonvml.EventSet) gonvml.Return {
	s, ok := set.(*EventSet)
	if !ok || s == nil {
		return gonvml.ERROR_INVALID_ARGUMENT
	}
	if mask&^SupportedEvents != 0 {
		return gonvml.ERROR_NOT_SUPPORTED
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events.regs = append(d.events.regs, registration{set: s, mask: mask})
	return gonvml.SUCCESS
}

// Registered is the number of live event sets the device's events go to.
func (d *Device) Registered() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.events.regs {
		r.set.mu.Lock()
		if !r.set.freed {
			n++
		}
		r.set.mu.Unlock()
	}
	return n
}

// GetFieldValues answers NVML_FI_DEV_GET_GPU_RECOVERY_ACTION with the recovery action the
// driver asks for (SetRecoveryAction; none at first), as an unsigned int; any other field
// gets ERROR_NOT_SUPPORTED in its own return, as the driver answers a field it lacks.
func (d *Device) GetFieldValues(vals []gonvml.FieldValue) gonvml.Return {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range vals {
		v := &vals[i]
		if v.FieldId != gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
			v.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
			continue
		}
		v.ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_INT)
		v.Value = [8]byte{}
		binary.LittleEndian.PutUint32(v.Value[:], d.events.recovery)
		v.NvmlReturn = uint32(gonvml.SUCCESS)
	}
	return gonvml.SUCCESS
}

// RaiseXID delivers an XID as the driver reports it: to every set the device registered XID
// events on, naming the GPU and compute instance the driver confined it to (gi, ci; both
// negative for the whole GPU). unavailable also reports the GPU fallen off the bus.
func (d *Device) RaiseXID(xid uint64, gi, ci int, unavailable bool) {
	gid, cid := uint32(noInstance), uint32(noInstance)
	if gi >= 0 && ci >= 0 {
		gid, cid = uint32(gi), uint32(ci)
	}
	d.send(gonvml.EventData{Device: d, EventType: gonvml.EventTypeXidCriticalError, EventData: xid, GpuInstanceId: gid, ComputeInstanceId: cid})
	if unavailable {
		d.send(gonvml.EventData{Device: d, EventType: gonvml.EventTypeGpuUnavailableError, GpuInstanceId: noInstance, ComputeInstanceId: noInstance})
	}
}

// SetRecoveryAction sets what the driver asks for and reports the change as a
// recovery-action event.
func (d *Device) SetRecoveryAction(action gonvml.DeviceGpuRecoveryAction) {
	d.mu.Lock()
	d.events.recovery = uint32(action)
	d.mu.Unlock()
	d.send(gonvml.EventData{Device: d, EventType: gonvml.EventTypeGpuRecoveryAction, EventData: uint64(action), GpuInstanceId: noInstance, ComputeInstanceId: noInstance})
}

func (d *Device) send(ev gonvml.EventData) {
	d.mu.Lock()
	regs := append([]registration(nil), d.events.regs...)
	d.mu.Unlock()
	for _, r := range regs {
		if r.mask&ev.EventType != 0 {
			r.set.deliver(ev)
		}
	}
}
