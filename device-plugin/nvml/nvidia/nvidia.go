// Package nvidia is the nvml.Library backed by NVIDIA's driver through go-nvml
// (cgo + dlopen of libnvidia-ml.so.1). Loading fails cleanly with
// ERROR_LIBRARY_NOT_FOUND on a machine without the driver: nothing here
// panics when the library is missing.
package nvidia

import (
	"cmp"
	"fmt"
	"os/exec"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// Library adapts go-nvml to nvml.Library.
type Library struct {
	lib gonvml.Interface
	// NvidiaSMI is the nvidia-smi that ResetGPU runs (default "nvidia-smi", found on PATH).
	NvidiaSMI string
}

var _ nvml.GPUResetter = (*Library)(nil)

// ResetGPU resets GPU index by its UUID with nvidia-smi --gpu-reset, which NVML's API lacks
// (nvml.GPUResetter). The agent asks for it only for an empty GPU whose mode policy allows a
// reset (engine.DecideModeSwitch); nvidia-smi refuses while a process uses the GPU, and the
// error carries its output.
func (l *Library) ResetGPU(index int) error {
	const op = "DeviceReset"
	d, r := l.lib.DeviceGetHandleByIndex(index)
	if err := wrap(op, r); err != nil {
		return err
	}
	uuid, r := d.GetUUID()
	if err := wrap(op, r); err != nil {
		return err
	}
	smi := cmp.Or(l.NvidiaSMI, "nvidia-smi")
	out, err := exec.Command(smi, "--gpu-reset", "-i", uuid).CombinedOutput()
	if err != nil {
		return nvml.NewError(op, nvml.ErrorUnknown, fmt.Sprintf("%s --gpu-reset -i %s: %v: %s", smi, uuid, err, strings.TrimSpace(string(out))))
	}
	return nil
}

// New returns the real NVML; libraryPath may be empty for the default
// (libnvidia-ml.so.1 on the loader's search path).
func New(libraryPath string) *Library {
	var opts []gonvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, gonvml.WithLibraryPath(libraryPath))
	}
	return &Library{lib: gonvml.New(opts...)}
}

// FromInterface adapts any go-nvml Interface: NVIDIA's pkg/nvml/mock in CI (see the nvidiamock
// package), or a go-nvml library the caller has built itself.
func FromInterface(lib gonvml.Interface) *Library { return &Library{lib: lib} }

func wrap(op string, r gonvml.Return) error {
	if r == gonvml.SUCCESS {
		return nil
	}
	detail := ""
	if r == gonvml.ERROR_LIBRARY_NOT_FOUND {
		detail = "NVML library libnvidia-ml.so.1 not found: the NVIDIA driver is not installed or not mounted"
	}
	if r == gonvml.ERROR_DRIVER_NOT_LOADED {
		detail = "the NVIDIA kernel driver is not loaded"
	}
	return nvml.NewError(op, nvml.Return(r), detail)
}

// Init implements nvml.Library.
func (l *Library) Init() error { return wrap("Init", l.lib.Init()) }

// Shutdown implements nvml.Library.
func (l *Library) Shutdown() error { return wrap("Shutdown", l.lib.Shutdown()) }

// DriverVersion implements nvml.Library.
func (l *Library) DriverVersion() (string, error) {
	v, r := l.lib.SystemGetDriverVersion()
	return v, wrap("SystemGetDriverVersion", r)
}

// DeviceCount implements nvml.Library.
func (l *Library) DeviceCount() (int, error) {
	n, r := l.lib.DeviceGetCount()
	return n, wrap("DeviceGetCount", r)
}

// Device implements nvml.Library.
func (l *Library) Device(index int) (nvml.Device, error) {
	d, r := l.lib.DeviceGetHandleByIndex(index)
	if err := wrap("DeviceGetHandleByIndex", r); err != nil {
		return nil, err
	}
	return &device{d: d}, nil
}

type device struct{ d gonvml.Device }

func (d *device) UUID() (string, error) {
	u, r := d.d.GetUUID()
	return u, wrap("DeviceGetUUID", r)
}

func (d *device) Name() (string, error) {
	n, r := d.d.GetName()
	return n, wrap("DeviceGetName", r)
}

func (d *device) MemoryMiB() (uint64, error) {
	m, r := d.d.GetMemoryInfo()
	return m.Total / (1 << 20), wrap("DeviceGetMemoryInfo", r)
}

func (d *device) PCIDeviceID() (uint32, error) {
	p, r := d.d.GetPciInfo()
	return p.PciDeviceId, wrap("DeviceGetPciInfo", r)
}

func (d *device) MIGMode() (current, pending nvml.MIGMode, err error) {
	c, p, r := d.d.GetMigMode()
	return nvml.MIGMode(c), nvml.MIGMode(p), wrap("DeviceGetMigMode", r)
}

func (d *device) SetMIGMode(mode nvml.MIGMode) (nvml.Return, error) {
	activation, r := d.d.SetMigMode(int(mode))
	if err := wrap("DeviceSetMigMode", r); err != nil {
		return nvml.Success, err
	}
	return nvml.Return(activation), nil
}

// peer is the go-nvml device behind other, which must come from this adapter.
func peer(op string, other nvml.Device) (gonvml.Device, error) {
	o, ok := other.(*device)
	if !ok {
		return nil, nvml.NewError(op, nvml.ErrorInvalidArgument, fmt.Sprintf("the other device is a %T, not a go-nvml device", other))
	}
	return o.d, nil
}

func (d *device) TopologyCommonAncestor(other nvml.Device) (nvml.TopologyLevel, error) {
	const op = "DeviceGetTopologyCommonAncestor"
	o, err := peer(op, other)
	if err != nil {
		return nvml.TopologySystem, err
	}
	l, r := d.d.GetTopologyCommonAncestor(o)
	return nvml.TopologyLevel(l), wrap(op, r)
}

func (d *device) NVLinkPeer(other nvml.Device) (bool, error) {
	const op = "DeviceGetP2PStatus"
	o, err := peer(op, other)
	if err != nil {
		return false, err
	}
	s, r := d.d.GetP2PStatus(o, gonvml.P2P_CAPS_INDEX_NVLINK)
	if err := wrap(op, r); err != nil {
		return false, err
	}
	return s == gonvml.P2P_STATUS_OK, nil
}

func (d *device) GPUInstanceProfileInfo(profile int) (nvml.GPUInstanceProfileInfo, error) {
	i, r := d.d.GetGpuInstanceProfileInfo(profile)
	if err := wrap("DeviceGetGpuInstanceProfileInfo", r); err != nil {
		return nvml.GPUInstanceProfileInfo{}, err
	}
	return nvml.GPUInstanceProfileInfo{
		Profile: profile, ID: int(i.Id), SliceCount: int(i.SliceCount), InstanceCount: int(i.InstanceCount),
		MemorySizeMB: i.MemorySizeMB, MultiprocessorCount: int(i.MultiprocessorCount),
		CopyEngineCount: int(i.CopyEngineCount), DecoderCount: int(i.DecoderCount), EncoderCount: int(i.EncoderCount),
		JpegCount: int(i.JpegCount), OfaCount: int(i.OfaCount),
	}, nil
}

func (d *device) rawProfile(op string, profile int) (*gonvml.GpuInstanceProfileInfo, error) {
	i, r := d.d.GetGpuInstanceProfileInfo(profile)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	return &i, nil
}

func (d *device) GPUInstancePossiblePlacements(info nvml.GPUInstanceProfileInfo) ([]nvml.Placement, error) {
	const op = "DeviceGetGpuInstancePossiblePlacements"
	raw, err := d.rawProfile(op, info.Profile)
	if err != nil {
		return nil, err
	}
	pls, r := d.d.GetGpuInstancePossiblePlacements(raw)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	out := make([]nvml.Placement, 0, len(pls))
	for _, p := range pls {
		out = append(out, nvml.Placement{Start: int(p.Start), Size: int(p.Size)})
	}
	return out, nil
}

func (d *device) CreateGPUInstanceWithPlacement(info nvml.GPUInstanceProfileInfo, pl nvml.Placement) (nvml.GPUInstance, error) {
	const op = "DeviceCreateGpuInstanceWithPlacement"
	raw, err := d.rawProfile(op, info.Profile)
	if err != nil {
		return nil, err
	}
	gi, r := d.d.CreateGpuInstanceWithPlacement(raw, &gonvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)})
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	return &gpuInstance{gi: gi}, nil
}

func (d *device) GPUInstances(info nvml.GPUInstanceProfileInfo) ([]nvml.GPUInstance, error) {
	const op = "DeviceGetGpuInstances"
	raw, err := d.rawProfile(op, info.Profile)
	if err != nil {
		return nil, err
	}
	gis, r := d.d.GetGpuInstances(raw)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	out := make([]nvml.GPUInstance, 0, len(gis))
	for _, gi := range gis {
		out = append(out, &gpuInstance{gi: gi})
	}
	return out, nil
}

func (d *device) MIGDevices() ([]nvml.MIGDevice, error) {
	n, r := d.d.GetMaxMigDeviceCount()
	if err := wrap("DeviceGetMaxMigDeviceCount", r); err != nil {
		return nil, err
	}
	var out []nvml.MIGDevice
	for i := 0; i < n; i++ {
		md, r := d.d.GetMigDeviceHandleByIndex(i)
		if r == gonvml.ERROR_NOT_FOUND || r == gonvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device at this index
		}
		if err := wrap("DeviceGetMigDeviceHandleByIndex", r); err != nil {
			return nil, err
		}
		uuid, r := md.GetUUID()
		if err := wrap("DeviceGetUUID", r); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		gi, r := md.GetGpuInstanceId()
		if err := wrap("DeviceGetGpuInstanceId", r); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		ci, r := md.GetComputeInstanceId()
		if err := wrap("DeviceGetComputeInstanceId", r); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		out = append(out, nvml.MIGDevice{UUID: uuid, GPUInstanceID: gi, ComputeInstanceID: ci})
	}
	return out, nil
}

type gpuInstance struct{ gi gonvml.GpuInstance }

func (g *gpuInstance) Info() (nvml.GPUInstanceInfo, error) {
	i, r := g.gi.GetInfo()
	if err := wrap("GpuInstanceGetInfo", r); err != nil {
		return nvml.GPUInstanceInfo{}, err
	}
	return nvml.GPUInstanceInfo{ID: int(i.Id), ProfileID: int(i.ProfileId), Placement: nvml.Placement{Start: int(i.Placement.Start), Size: int(i.Placement.Size)}}, nil
}

func (g *gpuInstance) ComputeInstanceProfileInfo(profile int) (nvml.ComputeInstanceProfileInfo, error) {
	i, r := g.gi.GetComputeInstanceProfileInfo(profile, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if err := wrap("GpuInstanceGetComputeInstanceProfileInfo", r); err != nil {
		return nvml.ComputeInstanceProfileInfo{}, err
	}
	return nvml.ComputeInstanceProfileInfo{Profile: profile, ID: int(i.Id), SliceCount: int(i.SliceCount), InstanceCount: int(i.InstanceCount)}, nil
}

func (g *gpuInstance) raw(op string, profile int) (*gonvml.ComputeInstanceProfileInfo, error) {
	i, r := g.gi.GetComputeInstanceProfileInfo(profile, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	return &i, nil
}

func (g *gpuInstance) CreateComputeInstance(info nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, error) {
	const op = "GpuInstanceCreateComputeInstance"
	raw, err := g.raw(op, info.Profile)
	if err != nil {
		return nil, err
	}
	ci, r := g.gi.CreateComputeInstance(raw)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	return &computeInstance{ci: ci}, nil
}

func (g *gpuInstance) ComputeInstances(info nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, error) {
	const op = "GpuInstanceGetComputeInstances"
	raw, err := g.raw(op, info.Profile)
	if err != nil {
		return nil, err
	}
	cis, r := g.gi.GetComputeInstances(raw)
	if err := wrap(op, r); err != nil {
		return nil, err
	}
	out := make([]nvml.ComputeInstance, 0, len(cis))
	for _, ci := range cis {
		out = append(out, &computeInstance{ci: ci})
	}
	return out, nil
}

func (g *gpuInstance) Destroy() error { return wrap("GpuInstanceDestroy", g.gi.Destroy()) }

type computeInstance struct{ ci gonvml.ComputeInstance }

func (c *computeInstance) Info() (nvml.ComputeInstanceInfo, error) {
	i, r := c.ci.GetInfo()
	return nvml.ComputeInstanceInfo{ID: int(i.Id), ProfileID: int(i.ProfileId)}, wrap("ComputeInstanceGetInfo", r)
}

func (c *computeInstance) Destroy() error { return wrap("ComputeInstanceDestroy", c.ci.Destroy()) }

var _ nvml.Library = (*Library)(nil)
