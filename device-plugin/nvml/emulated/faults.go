package emulated

import (
	"fmt"
	"time"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Faults, slow calls and crash points. Every call the agent makes goes through call (queries)
// or begin and done (the MIG mutations), which count it, fail it with the fault queued for it
// (InjectFault, InjectSlow) or the one SetFaultPolicy picks, and, at a crash point
// (CrashAfter), let it finish and then kill the backend: every later call fails and changes
// nothing, as if the agent had died right after the call returned. A failed call changes
// nothing (NVML's calls are atomic); the return codes are the driver's.

// Operation names (NVML function names), for faults, crash points and Calls.
const (
	OpInit                       = "Init"
	OpDriverVersion              = "SystemGetDriverVersion"
	OpDeviceCount                = "DeviceGetCount"
	OpDeviceHandle               = "DeviceGetHandleByIndex"
	OpUUID                       = "DeviceGetUUID"
	OpName                       = "DeviceGetName"
	OpMemory                     = "DeviceGetMemoryInfo"
	OpPCIInfo                    = "DeviceGetPciInfo"
	OpMIGMode                    = "DeviceGetMigMode"
	OpGPUInstanceProfileInfo     = "DeviceGetGpuInstanceProfileInfo"
	OpPossiblePlacements         = "DeviceGetGpuInstancePossiblePlacements"
	OpGPUInstances               = "DeviceGetGpuInstances"
	OpMIGDevices                 = "DeviceGetMigDeviceHandleByIndex"
	OpGPUInstanceInfo            = "GpuInstanceGetInfo"
	OpComputeInstanceProfileInfo = "GpuInstanceGetComputeInstanceProfileInfo"
	OpComputeInstances           = "GpuInstanceGetComputeInstances"
	OpComputeInstanceInfo        = "ComputeInstanceGetInfo"
	OpCreateGPUInstance          = "CreateGpuInstanceWithPlacement"
	OpCreateComputeInstance      = "CreateComputeInstance"
	OpDestroyComputeInst         = "ComputeInstanceDestroy"
	OpDestroyGPUInstance         = "GpuInstanceDestroy"
)

// Ops lists every operation of the agent's observe, create, destroy and health paths
// (events.go's included), in a stable order; ModeOps (mode.go) lists the others.
func Ops() []string {
	return []string{OpInit, OpDriverVersion, OpDeviceCount, OpDeviceHandle, OpUUID, OpName, OpMemory, OpPCIInfo, OpMIGMode,
		OpGPUInstanceProfileInfo, OpPossiblePlacements, OpGPUInstances, OpMIGDevices, OpGPUInstanceInfo, OpComputeInstanceProfileInfo,
		OpComputeInstances, OpComputeInstanceInfo, OpCreateGPUInstance, OpCreateComputeInstance, OpDestroyComputeInst, OpDestroyGPUInstance,
		OpEventSetCreate, OpEventSetWait, OpRegisterEvents, OpSupportedEventTypes, OpRecoveryAction}
}

// Fault is what one call does instead of its work, or before it.
type Fault struct {
	// Return, when not Success, fails the call with that code; nothing changes.
	Return nvml.Return
	// Delay makes the call take that long first (a slow driver), with the backend's lock
	// released meanwhile.
	Delay time.Duration
}

// InjectFault makes the next n calls of op fail with r (in order, after any
// faults already queued for op).
func (b *Backend) InjectFault(op string, r nvml.Return, n int) {
	b.queue(op, Fault{Return: r}, n)
}

// InjectSlow makes the next n calls of op take d before they do their work.
func (b *Backend) InjectSlow(op string, d time.Duration, n int) {
	b.queue(op, Fault{Delay: d}, n)
}

func (b *Backend) queue(op string, f Fault, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range n {
		b.faults[op] = append(b.faults[op], f)
	}
}

// SetFaultPolicy makes policy decide the fault of every call that has none queued (the zero
// Fault: none); nil removes it. It is called with the backend's lock held: it must not call
// the backend.
func (b *Backend) SetFaultPolicy(policy func(op string) Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.policy = policy
}

// FailInit makes Init fail with r (Success to clear), e.g. ErrorDriverNotLoaded.
func (b *Backend) FailInit(r nvml.Return) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initFail = r
}

// crashPoint kills the backend after the n-th next successful call of its operation.
type crashPoint struct {
	left int
	then func()
}

// CrashAfter kills the backend right after the n-th next successful call of op (a MIG
// create or destroy): that call's work is done (and in the state file), then every later call
// of this backend fails with ERROR_UNKNOWN and changes nothing, as if the process had been
// killed when the call returned. then (may be nil) runs at that moment, before the call
// returns, with the backend's lock held: it must not call the backend. A new backend on
// the same state file is the restarted process.
func (b *Backend) CrashAfter(op string, n int, then func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.crashes[op] = &crashPoint{left: n, then: then}
}

// ClearCrashPoints disarms every crash point that has not fired.
func (b *Backend) ClearCrashPoints() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.crashes = map[string]*crashPoint{}
}

// Crashed reports whether a crash point killed the backend.
func (b *Backend) Crashed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.crashed
}

func (b *Backend) deadErr(op string) error {
	return nvml.NewError(op, nvml.ErrorUnknown, "the process was killed at a crash point")
}

// call counts a call, fails it when the backend is dead or NVML is not initialized, and
// applies its fault. Called with b.mu held (released while a slow call sleeps).
func (b *Backend) call(op string) error {
	b.calls[op]++
	if b.crashed {
		return b.deadErr(op)
	}
	if !b.initialized {
		return nvml.NewError(op, nvml.ErrorUninitialized, "")
	}
	return b.fault(op)
}

// begin is call for a MIG mutation, which also takes the backend's latency.
func (b *Backend) begin(op string) error {
	if err := b.call(op); err != nil {
		return err
	}
	if b.opts.Latency > 0 {
		b.sleep(b.opts.Latency)
		if b.crashed {
			return b.deadErr(op)
		}
	}
	return nil
}

// done ends a successful MIG mutation: at its crash point the backend dies now.
func (b *Backend) done(op string) {
	cp := b.crashes[op]
	if cp == nil || b.crashed {
		return
	}
	if cp.left--; cp.left > 0 {
		return
	}
	delete(b.crashes, op)
	b.crashed = true
	if cp.then != nil {
		cp.then()
	}
}

// fault applies the next fault queued for op, or the policy's. Called with b.mu held.
func (b *Backend) fault(op string) error {
	var f Fault
	if q := b.faults[op]; len(q) > 0 {
		f, b.faults[op] = q[0], q[1:]
	} else if b.policy != nil {
		f = b.policy(op)
	}
	if f.Delay > 0 {
		b.sleep(f.Delay)
		if b.crashed {
			return b.deadErr(op)
		}
	}
	if f.Return != nvml.Success {
		return nvml.NewError(op, f.Return, "injected fault")
	}
	return nil
}

// sleep waits d with b.mu released.
func (b *Backend) sleep(d time.Duration) {
	b.mu.Unlock()
	time.Sleep(d)
	b.mu.Lock()
}

// ClearFaults drops the faults still queued for op.
func (b *Backend) ClearFaults(op string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.faults, op)
}

// FaultsLeft is how many queued faults op has not consumed yet.
func (b *Backend) FaultsLeft(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.faults[op])
}

// String names a fault for test output.
func (f Fault) String() string {
	switch {
	case f.Return != nvml.Success && f.Delay > 0:
		return fmt.Sprintf("%s after %s", f.Return, f.Delay)
	case f.Return != nvml.Success:
		return f.Return.String()
	case f.Delay > 0:
		return "slow " + f.Delay.String()
	}
	return "none"
}
