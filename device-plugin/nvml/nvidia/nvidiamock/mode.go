package nvidiamock

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIG mode and topology. go-nvml's mock switches MIG mode at once, always succeeds and reports
// the pending mode equal to the current one; it has no topology (its GetTopologyCommonAncestor
// and GetP2PStatus are unset). The driver's rules added here are those nvml.h documents for
// nvmlDeviceSetMigMode and nvmlDeviceGetMigMode, for the only GPUs whose mock data this
// package uses, the A100 and A30 (Ampere):
//
//   - a change is pending (GetMigMode's pendingMode) until the GPU is reset (ResetGPU): the
//     call succeeds with activationStatus ERROR_RESET_REQUIRED, the case nvml.h describes
//     where the driver cannot reset the GPU itself;
//   - while a client holds the GPU (Hold), activationStatus is ERROR_IN_USE and the change
//     stays pending; a reset is refused with ERROR_IN_USE;
//   - asking for the mode the GPU is in succeeds with activationStatus SUCCESS and cancels
//     a pending change;
//   - while a GPU instance exists the call fails with ERROR_IN_USE and changes nothing (our
//     conservative reading: nvml.h does not say; docs/design/geometry.md, "MIG mode").
//
// MIG calls: profile info and GPU instance creation fail with ERROR_NOT_SUPPORTED while MIG
// mode is off, as nvml.h documents.
//
// What this cannot express: the driver resetting the GPU itself on bare metal (the change is
// then current at once), Hopper's switch without a reset, and any real topology: the topology
// is whatever the test sets with SetTopology.

// SetMigMode is nvmlDeviceSetMigMode with the rules above.
func (d *Device) SetMigMode(mode int) (activation gonvml.Return, ret gonvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refuse("DeviceSetMigMode") {
		return gonvml.ERROR_NO_PERMISSION, gonvml.ERROR_NO_PERMISSION
	}
	if mode != gonvml.DEVICE_MIG_ENABLE && mode != gonvml.DEVICE_MIG_DISABLE {
		return gonvml.ERROR_INVALID_ARGUMENT, gonvml.ERROR_INVALID_ARGUMENT
	}
	if len(d.live) > 0 {
		return gonvml.ERROR_IN_USE, gonvml.ERROR_IN_USE
	}
	current, _, _ := d.mock.GetMigMode()
	d.pending = mode
	switch {
	case mode == current:
		return gonvml.SUCCESS, gonvml.SUCCESS
	case d.held:
		return gonvml.ERROR_IN_USE, gonvml.SUCCESS
	}
	return gonvml.ERROR_RESET_REQUIRED, gonvml.SUCCESS
}

// GetMigMode is nvmlDeviceGetMigMode: the current mode and the one pending until a reset.
func (d *Device) GetMigMode() (current, pending int, ret gonvml.Return) {
	current, _, ret = d.mock.GetMigMode()
	d.mu.Lock()
	defer d.mu.Unlock()
	return current, d.pending, ret
}

// Hold makes a client (as DCGM or a monitoring daemon would) hold the GPU, or releases it.
func (d *Device) Hold(held bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = held
}

// ResetGPU is a GPU reset (nvidia-smi -r): the pending MIG mode becomes current. It fails
// with ERROR_IN_USE while a client holds the GPU or a GPU instance exists.
func (d *Device) ResetGPU() gonvml.Return {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held || len(d.live) > 0 {
		return gonvml.ERROR_IN_USE
	}
	_, _ = d.mock.SetMigMode(d.pending) // the mock's SetMigMode cannot fail
	return gonvml.SUCCESS
}

// Topology says how two GPUs of the mock machine, by index, are connected: their common
// ancestor in the PCIe tree and whether NVLink joins them.
type Topology func(i, j int) (level gonvml.GpuTopologyLevel, nvlink bool)

// SetTopology sets the machine's topology; without one both calls fail with
// ERROR_NOT_SUPPORTED, as nvml.h documents where the OS cannot tell.
func (l *Library) SetTopology(t Topology) {
	l.topoMu.Lock()
	defer l.topoMu.Unlock()
	l.topology = t
}

// link is the topology between d and other (a device of the same mock machine).
func (d *Device) link(other gonvml.Device) (gonvml.GpuTopologyLevel, bool, gonvml.Return) {
	o, ok := other.(*Device)
	if !ok || o.lib != d.lib {
		return 0, false, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.lib.topoMu.Lock()
	t := d.lib.topology
	d.lib.topoMu.Unlock()
	if t == nil {
		return 0, false, gonvml.ERROR_NOT_SUPPORTED
	}
	level, nvlink := t(d.index, o.index)
	return level, nvlink, gonvml.SUCCESS
}

// GetTopologyCommonAncestor is nvmlDeviceGetTopologyCommonAncestor over SetTopology's topology.
func (d *Device) GetTopologyCommonAncestor(other gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
	level, _, r := d.link(other)
	return level, r
}

// GetP2PStatus is nvmlDeviceGetP2PStatus over SetTopology's topology; it answers only the
// NVLink capability (NVML_P2P_CAPS_INDEX_NVLINK).
func (d *Device) GetP2PStatus(other gonvml.Device, index gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
	if index != gonvml.P2P_CAPS_INDEX_NVLINK {
		return gonvml.P2P_STATUS_UNKNOWN, gonvml.ERROR_NOT_SUPPORTED
	}
	_, nvlink, r := d.link(other)
	if r != gonvml.SUCCESS {
		return gonvml.P2P_STATUS_UNKNOWN, r
	}
	if !nvlink {
		return gonvml.P2P_STATUS_NOT_SUPPORTED, gonvml.SUCCESS
	}
	return gonvml.P2P_STATUS_OK, gonvml.SUCCESS
}

// GetGpuInstanceProfileInfo is the mock's, refused with ERROR_NOT_SUPPORTED while MIG mode is
// off (nvml.h, nvmlDeviceGetGpuInstanceProfileInfoV: "If device doesn't have MIG mode
// enabled"); the mock answers in either mode.
func (d *Device) GetGpuInstanceProfileInfo(profile int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
	if current, _, _ := d.mock.GetMigMode(); current != gonvml.DEVICE_MIG_ENABLE {
		return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_NOT_SUPPORTED
	}
	return d.mock.GetGpuInstanceProfileInfo(profile)
}
