package emulated

import (
	"fmt"
	"sort"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

type device struct {
	b     *Backend
	index int
}

func (d *device) gpu() *gpu { return d.b.gpus[d.index] }

func (d *device) UUID() (string, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return d.gpu().uuid, d.b.call(OpUUID)
}

func (d *device) Name() (string, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return "Emulated NVIDIA " + d.gpu().model.String(), d.b.call(OpName)
}

func (d *device) MemoryMiB() (uint64, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	return d.gpu().model.MemoryMiB(), d.b.call(OpMemory)
}

func (d *device) PCIDeviceID() (uint32, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	ids := d.gpu().model.PCIDeviceIDs()
	if len(ids) == 0 {
		return 0, d.b.call(OpPCIInfo)
	}
	return uint32(ids[0])<<16 | 0x10DE, d.b.call(OpPCIInfo)
}

// migOn refuses a MIG call on a GPU whose current MIG mode is off, with NVML's
// ERROR_NOT_SUPPORTED (nvml.h: "If device doesn't have MIG mode enabled").
func (d *device) migOn(op string) error {
	if d.gpu().migMode != nvml.MIGEnabled {
		return nvml.NewError(op, nvml.ErrorNotSupported, "MIG mode is disabled")
	}
	return nil
}

func (d *device) profile(op string, nvmlProfile int) (mig.Profile, error) {
	g := d.gpu()
	for _, p := range g.model.Profiles() {
		if p.NVMLProfile == nvmlProfile {
			return p, nil
		}
	}
	return mig.Profile{}, nvml.NewError(op, nvml.ErrorNotSupported, fmt.Sprintf("%s has no GPU instance profile %d", g.model, nvmlProfile))
}

func (d *device) GPUInstanceProfileInfo(profile int) (nvml.GPUInstanceProfileInfo, error) {
	const op = OpGPUInstanceProfileInfo
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(op); err != nil {
		return nvml.GPUInstanceProfileInfo{}, err
	}
	if err := d.migOn(op); err != nil {
		return nvml.GPUInstanceProfileInfo{}, err
	}
	p, err := d.profile(op, profile)
	if err != nil {
		return nvml.GPUInstanceProfileInfo{}, err
	}
	return nvml.GPUInstanceProfileInfo{
		Profile: profile, ID: p.SMIProfileID, SliceCount: p.ComputeSlices, InstanceCount: p.MaxCount,
		MemorySizeMB: uint64(p.MemoryGB) * 1024, MultiprocessorCount: p.ComputeSlices * 16,
	}, nil
}

func (d *device) GPUInstancePossiblePlacements(info nvml.GPUInstanceProfileInfo) ([]nvml.Placement, error) {
	const op = OpPossiblePlacements
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(op); err != nil {
		return nil, err
	}
	if err := d.migOn(op); err != nil {
		return nil, err
	}
	p, err := d.profile(op, info.Profile)
	if err != nil {
		return nil, err
	}
	var out []nvml.Placement
	for _, pl := range p.Placements() {
		out = append(out, nvml.Placement{Start: pl.Start, Size: pl.Size})
	}
	return out, nil
}

func (d *device) CreateGPUInstanceWithPlacement(info nvml.GPUInstanceProfileInfo, pl nvml.Placement) (nvml.GPUInstance, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.begin(OpCreateGPUInstance); err != nil {
		return nil, err
	}
	p, err := d.profile(OpCreateGPUInstance, info.Profile)
	if err != nil {
		return nil, err
	}
	gi, err := d.b.createGILocked(d.gpu(), p, mig.Placement{Start: pl.Start, Size: pl.Size})
	if err != nil {
		return nil, err
	}
	if err := d.b.saveLocked(); err != nil {
		return nil, nvml.NewError(OpCreateGPUInstance, nvml.ErrorUnknown, err.Error())
	}
	d.b.done(OpCreateGPUInstance)
	return &gpuInstanceHandle{d: d, id: gi.id}, nil
}

func (d *device) GPUInstances(info nvml.GPUInstanceProfileInfo) ([]nvml.GPUInstance, error) {
	const op = OpGPUInstances
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(op); err != nil {
		return nil, err
	}
	if err := d.migOn(op); err != nil {
		return nil, err
	}
	var ids []int
	for id, gi := range d.gpu().gis {
		if gi.profile.NVMLProfile == info.Profile {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	out := make([]nvml.GPUInstance, 0, len(ids))
	for _, id := range ids {
		out = append(out, &gpuInstanceHandle{d: d, id: id})
	}
	return out, nil
}

func (d *device) MIGDevices() ([]nvml.MIGDevice, error) {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if err := d.b.call(OpMIGDevices); err != nil {
		return nil, err
	}
	if err := d.migOn(OpMIGDevices); err != nil {
		return nil, err
	}
	var out []nvml.MIGDevice
	for _, gi := range d.gpu().gis {
		for _, ci := range gi.cis {
			out = append(out, nvml.MIGDevice{UUID: ci.uuid, GPUInstanceID: gi.id, ComputeInstanceID: ci.id})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPUInstanceID != out[j].GPUInstanceID {
			return out[i].GPUInstanceID < out[j].GPUInstanceID
		}
		return out[i].ComputeInstanceID < out[j].ComputeInstanceID
	})
	return out, nil
}

type gpuInstanceHandle struct {
	d  *device
	id int
}

// get is the GPU instance behind the handle; op (already counted by call or begin) names
// the call in the error.
func (h *gpuInstanceHandle) get(op string) (*gpuInstance, error) {
	gi := h.d.gpu().gis[h.id]
	if gi == nil {
		return nil, nvml.NewError(op, nvml.ErrorNotFound, fmt.Sprintf("GPU instance %d is gone", h.id))
	}
	return gi, nil
}

func (h *gpuInstanceHandle) Info() (nvml.GPUInstanceInfo, error) {
	h.d.b.mu.Lock()
	defer h.d.b.mu.Unlock()
	if err := h.d.b.call(OpGPUInstanceInfo); err != nil {
		return nvml.GPUInstanceInfo{}, err
	}
	gi, err := h.get(OpGPUInstanceInfo)
	if err != nil {
		return nvml.GPUInstanceInfo{}, err
	}
	return nvml.GPUInstanceInfo{ID: gi.id, ProfileID: gi.profile.SMIProfileID, Placement: nvml.Placement{Start: gi.placement.Start, Size: gi.placement.Size}}, nil
}

func (h *gpuInstanceHandle) ComputeInstanceProfileInfo(profile int) (nvml.ComputeInstanceProfileInfo, error) {
	const op = OpComputeInstanceProfileInfo
	h.d.b.mu.Lock()
	defer h.d.b.mu.Unlock()
	if err := h.d.b.call(op); err != nil {
		return nvml.ComputeInstanceProfileInfo{}, err
	}
	gi, err := h.get(op)
	if err != nil {
		return nvml.ComputeInstanceProfileInfo{}, err
	}
	slices, ok := ciSlices[profile]
	if !ok || slices > gi.profile.ComputeSlices {
		return nvml.ComputeInstanceProfileInfo{}, nvml.NewError(op, nvml.ErrorNotSupported, fmt.Sprintf("compute instance profile %d does not fit %s", profile, gi.profile.Name))
	}
	return nvml.ComputeInstanceProfileInfo{Profile: profile, ID: profile, SliceCount: slices, InstanceCount: gi.profile.ComputeSlices / slices}, nil
}

func (h *gpuInstanceHandle) CreateComputeInstance(info nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, error) {
	h.d.b.mu.Lock()
	defer h.d.b.mu.Unlock()
	if err := h.d.b.begin(OpCreateComputeInstance); err != nil {
		return nil, err
	}
	gi, err := h.get(OpCreateComputeInstance)
	if err != nil {
		return nil, err
	}
	ci, err := h.d.b.createCILocked(h.d.gpu(), gi, info.Profile)
	if err != nil {
		return nil, err
	}
	if err := h.d.b.saveLocked(); err != nil {
		return nil, nvml.NewError(OpCreateComputeInstance, nvml.ErrorUnknown, err.Error())
	}
	h.d.b.done(OpCreateComputeInstance)
	return &computeInstanceHandle{gi: h, id: ci.id}, nil
}

func (h *gpuInstanceHandle) ComputeInstances(info nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, error) {
	h.d.b.mu.Lock()
	defer h.d.b.mu.Unlock()
	if err := h.d.b.call(OpComputeInstances); err != nil {
		return nil, err
	}
	gi, err := h.get(OpComputeInstances)
	if err != nil {
		return nil, err
	}
	var ids []int
	for id, ci := range gi.cis {
		if ci.profile == info.Profile {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	out := make([]nvml.ComputeInstance, 0, len(ids))
	for _, id := range ids {
		out = append(out, &computeInstanceHandle{gi: h, id: id})
	}
	return out, nil
}

func (h *gpuInstanceHandle) Destroy() error {
	h.d.b.mu.Lock()
	defer h.d.b.mu.Unlock()
	if err := h.d.b.begin(OpDestroyGPUInstance); err != nil {
		return err
	}
	gi, err := h.get(OpDestroyGPUInstance)
	if err != nil {
		return err
	}
	if len(gi.cis) > 0 {
		return nvml.NewError(OpDestroyGPUInstance, nvml.ErrorInUse, fmt.Sprintf("GPU instance %d still has %d compute instance(s)", gi.id, len(gi.cis)))
	}
	g := h.d.gpu()
	next, err := g.state.Release(gi.profile, gi.placement)
	if err != nil {
		return nvml.NewError(OpDestroyGPUInstance, nvml.ErrorUnknown, err.Error())
	}
	g.state = next
	delete(g.gis, gi.id)
	if err := h.d.b.saveLocked(); err != nil {
		return nvml.NewError(OpDestroyGPUInstance, nvml.ErrorUnknown, err.Error())
	}
	h.d.b.done(OpDestroyGPUInstance)
	return nil
}

type computeInstanceHandle struct {
	gi *gpuInstanceHandle
	id int
}

func (h *computeInstanceHandle) get(op string) (*gpuInstance, *computeInstance, error) {
	gi, err := h.gi.get(op)
	if err != nil {
		return nil, nil, err
	}
	ci := gi.cis[h.id]
	if ci == nil {
		return nil, nil, nvml.NewError(op, nvml.ErrorNotFound, fmt.Sprintf("compute instance %d is gone", h.id))
	}
	return gi, ci, nil
}

func (h *computeInstanceHandle) Info() (nvml.ComputeInstanceInfo, error) {
	b := h.gi.d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call(OpComputeInstanceInfo); err != nil {
		return nvml.ComputeInstanceInfo{}, err
	}
	_, ci, err := h.get(OpComputeInstanceInfo)
	if err != nil {
		return nvml.ComputeInstanceInfo{}, err
	}
	return nvml.ComputeInstanceInfo{ID: ci.id, ProfileID: ci.profile}, nil
}

func (h *computeInstanceHandle) Destroy() error {
	b := h.gi.d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.begin(OpDestroyComputeInst); err != nil {
		return err
	}
	gi, ci, err := h.get(OpDestroyComputeInst)
	if err != nil {
		return err
	}
	if b.inUse[ci.uuid] {
		return nvml.NewError(OpDestroyComputeInst, nvml.ErrorInUse, fmt.Sprintf("MIG device %s is in use", ci.uuid))
	}
	delete(gi.cis, ci.id)
	if err := b.saveLocked(); err != nil {
		return nvml.NewError(OpDestroyComputeInst, nvml.ErrorUnknown, err.Error())
	}
	b.done(OpDestroyComputeInst)
	return nil
}

var _ nvml.Library = (*Backend)(nil)
