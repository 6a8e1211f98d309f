package emulated

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Events: an emulated GPU delivers the XIDs a test raises (RaiseXID) to the event sets its
// events are registered in, as NVML does, and keeps the recovery action the XID asks for until
// Recover clears it (a GPU reset) or the node reboots. Which XIDs make a GPU unhealthy is the
// agent's decision (device-plugin/engine/xid.go), never the emulator's: a test says what the
// driver would report, the XID and the recovery action.

// Operation names of the event calls (NVML function names).
const (
	OpEventSetCreate      = "EventSetCreate"
	OpEventSetWait        = "EventSetWait"
	OpRegisterEvents      = "DeviceRegisterEvents"
	OpSupportedEventTypes = "DeviceGetSupportedEventTypes"
	OpRecoveryAction      = "DeviceGetFieldValues"
	supportedEvents       = nvml.EventXidCriticalError | nvml.EventGPUUnavailable | nvml.EventGPURecoveryAction
	maxQueuedEvents       = 1024
	// controlPoll is how often a waiting event set looks for a control file (statefile.go).
	controlPoll = 200 * time.Millisecond
)

// XID is an XID a test raises on an emulated GPU.
type XID struct {
	// GPU is the GPU's index.
	GPU int `json:"gpu"`
	// GPUInstance is the id of the GPU instance the XID happened in, -1 (or absent from a
	// control file: see statefile.go) for the whole GPU. Its compute instance is named too,
	// as NVML names both.
	GPUInstance int `json:"gpuInstance"`
	// Code is the XID number, e.g. 79 (fallen off the bus), 94 (contained memory error).
	Code int `json:"xid"`
	// Action is the recovery action the driver then asks for (nvml.RecoveryAction); none
	// leaves the GPU's current one.
	Action nvml.RecoveryAction `json:"recoveryAction,omitempty"`
	// Unavailable also delivers a GPU-unavailable event (a GPU fallen off the bus).
	Unavailable bool `json:"unavailable,omitempty"`
}

// RaiseXID delivers an XID event (and, for x.Unavailable, a GPU-unavailable event) to every
// event set the GPU is registered in, and sets the GPU's recovery action to x.Action when it
// is not none (delivering a recovery-action event when that changes it).
func (b *Backend) RaiseXID(x XID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if x.GPU < 0 || x.GPU >= len(b.gpus) {
		return fmt.Errorf("raise XID: no GPU %d", x.GPU)
	}
	if x.Code <= 0 {
		return fmt.Errorf("raise XID: code %d is not an XID", x.Code)
	}
	g := b.gpus[x.GPU]
	ev := nvml.Event{Type: nvml.EventXidCriticalError, Data: uint64(x.Code), GPUInstanceID: nvml.NoInstance, ComputeInstanceID: nvml.NoInstance}
	if x.GPUInstance >= 0 {
		gi := g.gis[x.GPUInstance]
		if gi == nil {
			return fmt.Errorf("raise XID: GPU %d has no GPU instance %d", x.GPU, x.GPUInstance)
		}
		ev.GPUInstanceID = uint32(gi.id)
		for _, ci := range gi.cis {
			ev.ComputeInstanceID = uint32(ci.id)
		}
	}
	b.deliverLocked(x.GPU, ev)
	if x.Unavailable {
		b.deliverLocked(x.GPU, nvml.Event{Type: nvml.EventGPUUnavailable, GPUInstanceID: nvml.NoInstance, ComputeInstanceID: nvml.NoInstance})
	}
	if x.Action != nvml.RecoveryNone {
		b.setRecoveryLocked(g, x.Action)
	}
	return b.saveLocked()
}

// Recover is a GPU reset that worked: the GPU's recovery action goes back to none, with a
// recovery-action event.
func (b *Backend) Recover(gpuIndex int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gpuIndex < 0 || gpuIndex >= len(b.gpus) {
		return fmt.Errorf("recover: no GPU %d", gpuIndex)
	}
	b.setRecoveryLocked(b.gpus[gpuIndex], nvml.RecoveryNone)
	return b.saveLocked()
}

func (b *Backend) setRecoveryLocked(g *gpu, a nvml.RecoveryAction) {
	if g.recovery == a {
		return
	}
	g.recovery = a
	b.deliverLocked(g.index, nvml.Event{Type: nvml.EventGPURecoveryAction, Data: uint64(a), GPUInstanceID: nvml.NoInstance, ComputeInstanceID: nvml.NoInstance})
}

// deliverLocked queues ev for every live set where the GPU registered ev's type (b.mu held).
func (b *Backend) deliverLocked(gpuIndex int, ev nvml.Event) {
	ev.Device = &device{b: b, index: gpuIndex}
	for _, s := range b.sets {
		s.deliver(gpuIndex, ev)
	}
}

// EventSetCreate implements nvml.Library.
func (b *Backend) EventSetCreate() (nvml.EventSet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(OpEventSetCreate); err != nil {
		return nil, err
	}
	s := &eventSet{b: b, masks: map[int]uint64{}, wake: make(chan struct{}, 1)}
	b.sets = append(b.sets, s)
	return s, nil
}

type eventSet struct {
	b *Backend

	mu    sync.Mutex
	masks map[int]uint64 // by GPU index
	queue []nvml.Event
	freed bool
	wake  chan struct{}
}

func (s *eventSet) deliver(gpuIndex int, ev nvml.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed || s.masks[gpuIndex]&ev.Type == 0 || len(s.queue) >= maxQueuedEvents {
		return
	}
	s.queue = append(s.queue, ev)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Wait implements nvml.EventSet.
func (s *eventSet) Wait(timeout time.Duration) (nvml.Event, error) {
	s.b.mu.Lock()
	err := s.b.call(OpEventSetWait)
	s.b.mu.Unlock()
	if err != nil {
		return nvml.Event{}, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(controlPoll)
	defer poll.Stop()
	for {
		if err := s.b.applyControl(); err != nil {
			return nvml.Event{}, nvml.NewError(OpEventSetWait, nvml.ErrorUnknown, err.Error())
		}
		s.mu.Lock()
		if s.freed {
			s.mu.Unlock()
			return nvml.Event{}, nvml.NewError(OpEventSetWait, nvml.ErrorInvalidArgument, "event set freed")
		}
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-poll.C:
		case <-deadline.C:
			return nvml.Event{}, nvml.NewError(OpEventSetWait, nvml.ErrorTimeout, "")
		}
	}
}

// Free implements nvml.EventSet.
func (s *eventSet) Free() error {
	s.b.mu.Lock()
	s.b.sets = slices.DeleteFunc(s.b.sets, func(o *eventSet) bool { return o == s })
	s.b.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.freed = true
	s.queue = nil
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func (d *device) SupportedEventTypes() (uint64, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return supportedEvents, d.b.call(OpSupportedEventTypes)
}

func (d *device) RegisterEvents(mask uint64, set nvml.EventSet) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(OpRegisterEvents); err != nil {
		return err
	}
	s, ok := set.(*eventSet)
	if !ok || s.b != d.b {
		return nvml.NewError(OpRegisterEvents, nvml.ErrorInvalidArgument, "not an event set of this NVML")
	}
	if mask&^supportedEvents != 0 {
		return nvml.NewError(OpRegisterEvents, nvml.ErrorNotSupported, fmt.Sprintf("event types %#x are not supported", mask&^supportedEvents))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.masks[d.index] |= mask
	return nil
}

func (d *device) RecoveryAction() (nvml.RecoveryAction, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return d.gpu().recovery, d.b.call(OpRecoveryAction)
}
