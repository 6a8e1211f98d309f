// Package nvidiamock is NVIDIA's go-nvml mock (pkg/nvml/mock, data written by NVIDIA for the
// A100 and A30) with the rules the driver enforces added, so that the real adapter
// (device-plugin/nvml/nvidia) can run in CI against data Slicer did not write.
//
// The mock alone validates nothing: it creates overlapping GPU instances, any number of them,
// destroys a GPU instance that still has compute instances and has no MIG device handles. The
// driver refuses those, and this wrapper refuses them the way nvml.h documents:
//
//   - a placement that is not one of the profile's possible placements: ERROR_INVALID_ARGUMENT;
//   - a GPU instance that overlaps another, exceeds the profile's instance count, the GPU's
//     compute slices or its one set of media engines (OFA and JPEG): ERROR_INSUFFICIENT_RESOURCES;
//   - destroying a GPU instance that has compute instances, or a compute instance whose MIG
//     device a process uses (SetInUse): ERROR_IN_USE; a handle already destroyed:
//     ERROR_INVALID_ARGUMENT;
//   - MIG device handles (nvmlDeviceGetMigDeviceHandleByIndex) for every compute instance;
//   - event sets, XID events and the recovery-action field, which the mock lacks (events.go);
//   - MIG mode as the driver changes it (current and pending, a reset, a client holding the
//     GPU) and a topology the test sets, which the mock lacks too (mode.go).
//
// Every limit is read from the mock's own data (its possible placements, instance and slice
// counts, engine counts), never from internal/mig: the conformance suite compares Slicer's
// tables with this data, so taking the rules from the tables would make the check circular.
// The mock's H100, H200 and B200 data are synthetic (wrong placements for the double-memory
// 1-slice, the 3-slice and the 7-slice profiles) and must not be used here as truth.
package nvidiamock

import (
	"fmt"
	"sort"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// DriverVersion is what the mock's driver reports (go-nvml's dgxa100 server reports the same).
const DriverVersion = "550.54.15"

// Configs are the GPUs whose mock data NVIDIA wrote from real hardware, by the name of
// Slicer's model they are expected to be recognised as.
var Configs = map[string]gpus.Config{
	"A100-40GB":      gpus.A100_SXM4_40GB,
	"A100-PCIE-40GB": gpus.A100_PCIE_40GB,
	"A100-80GB":      gpus.A100_SXM4_80GB,
	"A100-PCIE-80GB": gpus.A100_PCIE_80GB,
	"A30-24GB":       gpus.A30_PCIE_24GB,
}

// Library is a go-nvml Interface over NVIDIA's mock server, with the driver's rules.
type Library struct {
	gonvml.Interface
	srv     *server.Server
	devices []*Device

	topoMu   sync.Mutex
	topology Topology // mode.go
}

// Forbid makes every call that changes a GPU (MIG mode, creating or destroying a GPU or
// compute instance) report itself to forbidden and fail with ERROR_NO_PERMISSION: for tools
// that must only read. The mock implements no other mutating call: any other one panics.
func (l *Library) Forbid(forbidden func(call string)) {
	for _, d := range l.devices {
		d.mu.Lock()
		d.forbidden = forbidden
		d.mu.Unlock()
		d.mock.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) {
			forbidden("DeviceSetMigMode")
			return gonvml.ERROR_NO_PERMISSION, gonvml.ERROR_NO_PERMISSION
		}
		d.mock.CreateGpuInstanceFunc = func(*gonvml.GpuInstanceProfileInfo) (gonvml.GpuInstance, gonvml.Return) {
			forbidden("DeviceCreateGpuInstance")
			return nil, gonvml.ERROR_NO_PERMISSION
		}
	}
}

// New returns a mock machine with one GPU per config, MIG mode off (as after installation).
func New(configs ...gpus.Config) (*Library, error) {
	srv, err := server.New(server.WithGPUs(configs...), server.WithDriverVersion(DriverVersion),
		server.WithNVMLVersion("12."+DriverVersion), server.WithCUDADriverVersion(12040))
	if err != nil {
		return nil, fmt.Errorf("go-nvml mock server: %w", err)
	}
	l := &Library{Interface: srv, srv: srv}
	for i, d := range srv.Devices {
		md, ok := d.(*server.Device)
		if !ok {
			return nil, fmt.Errorf("go-nvml mock device %d is a %T", i, d)
		}
		l.devices = append(l.devices, &Device{Device: md, mock: md, live: map[*GPUInstance]bool{}, lib: l, index: i, pending: md.MigMode})
	}
	return l, nil
}

// DeviceGetHandleByIndex returns the wrapped device.
func (l *Library) DeviceGetHandleByIndex(i int) (gonvml.Device, gonvml.Return) {
	if i < 0 || i >= len(l.devices) {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	return l.devices[i], gonvml.SUCCESS
}

// Mock returns device i as the wrapper holds it (for test setup: MIG mode, in-use marks).
func (l *Library) Mock(i int) *Device { return l.devices[i] }

// Server is the underlying go-nvml mock server (to override one of its functions in a test).
func (l *Library) Server() *server.Server { return l.srv }

// Device is one mock GPU with the driver's MIG rules.
type Device struct {
	gonvml.Device
	mock *server.Device

	mu        sync.Mutex
	live      map[*GPUInstance]bool
	order     int // creation counter of compute instances, for MIG device indexes
	inUse     map[string]bool
	forbidden func(call string) // set by Library.Forbid
	known     []gonvml.GpuInstanceProfileInfo
	events    deviceEvents // events.go
	lib       *Library
	index     int
	pending   int  // the pending MIG mode (mode.go); the current one is the mock's
	held      bool // a client (DCGM, a monitoring daemon) holds the GPU (mode.go)
}

// refuse reports a mutating call when Forbid is in effect (d.mu held).
func (d *Device) refuse(call string) bool {
	if d.forbidden == nil {
		return false
	}
	d.forbidden(call)
	return true
}

// EnableMIG sets MIG mode on, current and pending, as an administrator does (and the GPU
// is reset) before Slicer runs.
func (d *Device) EnableMIG() {
	_, _ = d.mock.SetMigMode(gonvml.DEVICE_MIG_ENABLE) // the mock's SetMigMode cannot fail
	d.mu.Lock()
	d.pending = gonvml.DEVICE_MIG_ENABLE
	d.mu.Unlock()
}

// Raw is go-nvml's mock device under the wrapper: a test replaces one of its functions to make
// the driver fail a call.
func (d *Device) Raw() *server.Device { return d.mock }

// SetInUse marks a MIG device as used by a process: destroying its compute instance fails
// with ERROR_IN_USE until cleared.
func (d *Device) SetInUse(migUUID string, inUse bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inUse == nil {
		d.inUse = map[string]bool{}
	}
	d.inUse[migUUID] = inUse
}

// Instances is the number of live GPU instances.
func (d *Device) Instances() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.live)
}

// profiles lists every GPU instance profile the mock device has, read from its data once
// (d.mu held).
func (d *Device) profiles() []gonvml.GpuInstanceProfileInfo {
	if d.known == nil {
		for p := 0; p < gonvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
			if info, ok := d.mock.Config.MIGProfiles.GpuInstanceProfiles[p]; ok {
				d.known = append(d.known, info)
			}
		}
	}
	return d.known
}

// whole is the largest count of each resource any one profile has: the GPU's totals.
func (d *Device) whole() (slices, ofa, jpeg uint32) {
	for _, p := range d.profiles() {
		slices, ofa, jpeg = max(slices, p.SliceCount), max(ofa, p.OfaCount), max(jpeg, p.JpegCount)
	}
	return slices, ofa, jpeg
}

// profileOf is the profile a live GPU instance was created with.
func (d *Device) profileOf(gi *GPUInstance) gonvml.GpuInstanceProfileInfo {
	for _, p := range d.profiles() {
		if p.Id == gi.info.ProfileId {
			return p
		}
	}
	return gonvml.GpuInstanceProfileInfo{}
}

// CreateGpuInstanceWithPlacement creates a GPU instance when the driver would.
func (d *Device) CreateGpuInstanceWithPlacement(info *gonvml.GpuInstanceProfileInfo, pl *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
	d.mu.Lock()
	refused := d.refuse("DeviceCreateGpuInstanceWithPlacement")
	d.mu.Unlock()
	if refused {
		return nil, gonvml.ERROR_NO_PERMISSION
	}
	if info == nil || pl == nil {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	if mode, _, _ := d.mock.GetMigMode(); mode != gonvml.DEVICE_MIG_ENABLE {
		return nil, gonvml.ERROR_NOT_SUPPORTED
	}
	possible, r := d.mock.GetGpuInstancePossiblePlacements(info)
	if r != gonvml.SUCCESS {
		return nil, r
	}
	legal := false
	for _, p := range possible {
		legal = legal || p == *pl
	}
	if !legal {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	wholeSlices, wholeOFA, wholeJPEG := d.whole()
	count, slices, ofa, jpeg := uint32(0), info.SliceCount, info.OfaCount, info.JpegCount
	for gi := range d.live {
		p, other := d.profileOf(gi), gi.info.Placement
		if pl.Start < other.Start+other.Size && other.Start < pl.Start+pl.Size {
			return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
		}
		if p.Id == info.Id {
			count++
		}
		slices, ofa, jpeg = slices+p.SliceCount, ofa+p.OfaCount, jpeg+p.JpegCount
	}
	if count >= info.InstanceCount || slices > wholeSlices || ofa > wholeOFA || jpeg > wholeJPEG {
		return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
	}
	raw, r := d.mock.CreateGpuInstanceWithPlacement(info, pl)
	if r != gonvml.SUCCESS {
		return nil, r
	}
	ginfo, r := raw.GetInfo()
	if r != gonvml.SUCCESS {
		return nil, r
	}
	// The driver numbers GPU instances from 1; the mock from 0.
	ginfo.Id++
	gi := &GPUInstance{GpuInstance: raw, dev: d, info: ginfo, live: map[*ComputeInstance]bool{}}
	d.live[gi] = true
	return gi, gonvml.SUCCESS
}

// GetGpuInstances lists the live GPU instances of a profile, by id.
func (d *Device) GetGpuInstances(info *gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstance, gonvml.Return) {
	if info == nil {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var gis []*GPUInstance
	for gi := range d.live {
		if gi.info.ProfileId == info.Id {
			gis = append(gis, gi)
		}
	}
	sort.Slice(gis, func(i, j int) bool { return gis[i].info.Id < gis[j].info.Id })
	out := make([]gonvml.GpuInstance, 0, len(gis))
	for _, gi := range gis {
		out = append(out, gi)
	}
	return out, gonvml.SUCCESS
}

// GetMaxMigDeviceCount is the largest number of MIG devices the GPU can hold.
func (d *Device) GetMaxMigDeviceCount() (int, gonvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := uint32(0)
	for _, p := range d.profiles() {
		n = max(n, p.InstanceCount)
	}
	return int(n), gonvml.SUCCESS
}

// GetMigDeviceHandleByIndex returns the MIG device of the index-th compute instance, in
// creation order; ERROR_NOT_FOUND past the last one.
func (d *Device) GetMigDeviceHandleByIndex(index int) (gonvml.Device, gonvml.Return) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cis []*ComputeInstance
	for gi := range d.live {
		for ci := range gi.live {
			cis = append(cis, ci)
		}
	}
	sort.Slice(cis, func(i, j int) bool { return cis[i].order < cis[j].order })
	if index < 0 || index >= len(cis) {
		return nil, gonvml.ERROR_NOT_FOUND
	}
	ci := cis[index]
	return &mock.Device{
		GetUUIDFunc:              func() (string, gonvml.Return) { return ci.uuid, gonvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, gonvml.Return) { return int(ci.gi.info.Id), gonvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, gonvml.Return) { return int(ci.info.Id), gonvml.SUCCESS },
	}, gonvml.SUCCESS
}

// GPUInstance is one GPU instance of a wrapped device.
type GPUInstance struct {
	gonvml.GpuInstance
	dev       *Device
	info      gonvml.GpuInstanceInfo
	live      map[*ComputeInstance]bool
	destroyed bool
}

// GetInfo returns the instance's info, with the driver's numbering.
func (g *GPUInstance) GetInfo() (gonvml.GpuInstanceInfo, gonvml.Return) {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	if g.destroyed {
		return gonvml.GpuInstanceInfo{}, gonvml.ERROR_INVALID_ARGUMENT
	}
	info := g.info
	info.Device = g.dev
	return info, gonvml.SUCCESS
}

// CreateComputeInstance creates a compute instance when the GPU instance has room for it.
func (g *GPUInstance) CreateComputeInstance(info *gonvml.ComputeInstanceProfileInfo) (gonvml.ComputeInstance, gonvml.Return) {
	if info == nil {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	if g.dev.refuse("GpuInstanceCreateComputeInstance") {
		return nil, gonvml.ERROR_NO_PERMISSION
	}
	if g.destroyed {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	slices, count := info.SliceCount, uint32(0)
	for ci := range g.live {
		slices += ci.slices
		if ci.info.ProfileId == info.Id {
			count++
		}
	}
	if count >= info.InstanceCount || slices > g.dev.profileOf(g).SliceCount {
		return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
	}
	raw, r := g.GpuInstance.CreateComputeInstance(info)
	if r != gonvml.SUCCESS {
		return nil, r
	}
	cinfo, r := raw.GetInfo()
	if r != gonvml.SUCCESS {
		return nil, r
	}
	g.dev.order++
	ci := &ComputeInstance{ComputeInstance: raw, gi: g, info: cinfo, slices: info.SliceCount, order: g.dev.order,
		uuid: fmt.Sprintf("MIG-%08x-0000-4000-8000-%04x%08x", g.dev.order, g.info.Id, cinfo.Id)}
	g.live[ci] = true
	return ci, gonvml.SUCCESS
}

// GetComputeInstances lists the live compute instances of a profile.
func (g *GPUInstance) GetComputeInstances(info *gonvml.ComputeInstanceProfileInfo) ([]gonvml.ComputeInstance, gonvml.Return) {
	if info == nil {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	var cis []*ComputeInstance
	for ci := range g.live {
		if ci.info.ProfileId == info.Id {
			cis = append(cis, ci)
		}
	}
	sort.Slice(cis, func(i, j int) bool { return cis[i].order < cis[j].order })
	out := make([]gonvml.ComputeInstance, 0, len(cis))
	for _, ci := range cis {
		out = append(out, ci)
	}
	return out, gonvml.SUCCESS
}

// Destroy destroys the GPU instance unless it has compute instances.
func (g *GPUInstance) Destroy() gonvml.Return {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	switch {
	case g.dev.refuse("GpuInstanceDestroy"):
		return gonvml.ERROR_NO_PERMISSION
	case g.destroyed:
		return gonvml.ERROR_INVALID_ARGUMENT
	case len(g.live) > 0:
		return gonvml.ERROR_IN_USE
	}
	if r := g.GpuInstance.Destroy(); r != gonvml.SUCCESS {
		return r
	}
	g.destroyed = true
	delete(g.dev.live, g)
	return gonvml.SUCCESS
}

// ComputeInstance is one compute instance (and its MIG device).
type ComputeInstance struct {
	gonvml.ComputeInstance
	gi        *GPUInstance
	info      gonvml.ComputeInstanceInfo
	slices    uint32
	order     int
	uuid      string
	destroyed bool
}

// GetInfo returns the compute instance's info.
func (c *ComputeInstance) GetInfo() (gonvml.ComputeInstanceInfo, gonvml.Return) {
	c.gi.dev.mu.Lock()
	defer c.gi.dev.mu.Unlock()
	if c.destroyed {
		return gonvml.ComputeInstanceInfo{}, gonvml.ERROR_INVALID_ARGUMENT
	}
	info := c.info
	info.Device, info.GpuInstance = c.gi.dev, c.gi
	return info, gonvml.SUCCESS
}

// Destroy destroys the compute instance unless its MIG device is in use.
func (c *ComputeInstance) Destroy() gonvml.Return {
	d := c.gi.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refuse("ComputeInstanceDestroy"):
		return gonvml.ERROR_NO_PERMISSION
	case c.destroyed:
		return gonvml.ERROR_INVALID_ARGUMENT
	case d.inUse[c.uuid]:
		return gonvml.ERROR_IN_USE
	}
	if r := c.ComputeInstance.Destroy(); r != gonvml.SUCCESS {
		return r
	}
	c.destroyed = true
	delete(c.gi.live, c)
	return gonvml.SUCCESS
}
