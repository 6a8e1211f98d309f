// Package migdra renders a node's MIG geometry as Dynamic Resource Allocation objects
// (resource.k8s.io/v1): the ResourceSlices a DRA driver publishes for the node and the
// DeviceClasses that select one profile each. Every fact comes from internal/mig; this package
// only spells it in the API.
//
// A node's pool holds, per GPU, one counter set (one counter per memory slice, the compute
// slices, the media engine) and one device per (profile, legal placement) that consumes
// exactly the counters of its placement, so the stock allocator can only pick placements that
// fit beside the allocated ones (mig.GPUState.CanTake, checked by this package's tests).
// Devices are grouped one profile per slice: the allocator orders slices by name, which a
// publisher does not control, but a class selects one profile, so the order inside that
// profile's slice is the order the allocator tries (see mig.DeviceOrder).
//
// A GPU Slicer may switch between MIG slices and a whole GPU (GPU.Switchable) is published
// both ways: its MIG devices, and one whole-GPU device that consumes every counter of its
// counter set. A whole device and any of its GPU's MIG devices then never fit together, so the
// stock allocator never hands out a GPU and one of its slices (docs/design/whole-gpus.md, "DRA").
package migdra

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
)

// DriverName is Slicer's DRA driver; it is also the domain of its device attributes.
const DriverName = "mig.slicer.dev"

// Attribute and capacity names (in DriverName's domain).
const (
	AttrType           = "type" // "mig" or "gpu"
	AttrProfile        = "profile"
	AttrGPUUUID        = "gpuUUID"
	AttrGPUIndex       = "gpuIndex"
	AttrModel          = "model"
	AttrPlacementStart = "placementStart"
	AttrPlacementSize  = "placementSize"
	CapacityMemory     = "memory"
)

// Counter names in each GPU's counter set.
const (
	CounterCompute = "compute-slices"
	CounterMedia   = "media-engines"
)

// MemorySliceCounter is the counter of one memory slice.
func MemorySliceCounter(i int) string { return "memory-slice-" + strconv.Itoa(i) }

// GPU is one GPU of the node as the driver publishes it.
type GPU struct {
	Index int
	UUID  string
	// State is the GPU's MIG occupancy (its model is the GPU's model); it only orders the
	// devices in mig.PreferredOrder. The zero state is a GPU Slicer cannot partition.
	State mig.GPUState
	// MIGEnabled is false for a GPU in whole-GPU mode: it is published as one device.
	MIGEnabled bool
	// Switchable is a GPU whose MIG mode Slicer may switch (the Slicer's spec.gpuModes says
	// Dynamic): with a State of its model, it is published as its MIG devices and as a whole
	// device that consumes every counter of its GPU, in either mode. Preparing a device of the
	// other mode than the GPU's current one needs the switch first.
	Switchable bool
	// Healthy GPUs are published; an unhealthy one is left out until it recovers.
	Healthy bool
	// Driver is the node's NVIDIA driver version: the devices of a profile it is too old for
	// (mig.Profile.SupportedBy) are not published.
	Driver string
}

// PublishesMIGDevices says whether Pool publishes the MIG devices (and the counter set) of a
// healthy GPU: one of a model Slicer knows that is in MIG mode or may be switched to it.
func PublishesMIGDevices(g GPU) bool { return g.State.Valid() && (g.MIGEnabled || g.Switchable) }

// CounterSetName is the counter set of GPU index i.
func CounterSetName(i int) string { return "gpu-" + strconv.Itoa(i) }

// DeviceName is the name of the device of profile p at pl on GPU index i: a DNS label.
func DeviceName(i int, p mig.Profile, pl mig.Placement) string {
	return fmt.Sprintf("gpu-%d-%s-at-%d", i, profileToken(p), pl.Start)
}

// WholeGPUDeviceName is the device of a GPU in whole-GPU mode.
func WholeGPUDeviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// Pool renders the node's pool: slices of counter sets (at most
// resourceapi.ResourceSliceMaxCounterSets each), one slice per profile with its devices in
// the given order (split when a profile has more devices than a slice may hold), then a slice
// of whole GPUs, if any.
func Pool(gpus []GPU, order mig.DeviceOrder) (resourceslice.Pool, error) {
	var pool resourceslice.Pool
	node := mig.Node{GPUs: make([]mig.GPU, 0, len(gpus))}
	var migGPUs []GPU
	var whole []resourceapi.Device
	seen := map[int]bool{}
	for _, g := range gpus {
		if seen[g.Index] {
			return pool, fmt.Errorf("GPU index %d listed twice", g.Index)
		}
		seen[g.Index] = true
		if !g.Healthy {
			continue
		}
		if g.Switchable || !PublishesMIGDevices(g) {
			whole = append(whole, wholeDevice(g))
		}
		if !PublishesMIGDevices(g) {
			continue
		}
		migGPUs = append(migGPUs, g)
		node.GPUs = append(node.GPUs, mig.GPU{State: g.State, Usable: true})
	}
	var sets []resourceapi.CounterSet
	for _, g := range migGPUs {
		sets = append(sets, counterSet(g))
	}
	for len(sets) > 0 {
		n := min(len(sets), resourceapi.ResourceSliceMaxCounterSets)
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: sets[:n]})
		sets = sets[n:]
	}
	var cur []resourceapi.Device
	curProfile := ""
	flush := func() {
		if len(cur) > 0 {
			pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: cur})
		}
		cur = nil
	}
	for _, d := range mig.Devices(node, order) {
		if !d.Profile.SupportedBy(migGPUs[d.GPU].Driver) {
			continue
		}
		if d.Profile.Name != curProfile || len(cur) == resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			flush()
			curProfile = d.Profile.Name
		}
		cur = append(cur, migDevice(migGPUs[d.GPU], d))
	}
	flush()
	for len(whole) > 0 {
		n := min(len(whole), resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures)
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: whole[:n]})
		whole = whole[n:]
	}
	return pool, nil
}

func counterSet(g GPU) resourceapi.CounterSet {
	m := g.State.Model()
	c := map[string]resourceapi.Counter{
		CounterCompute: {Value: *resource.NewQuantity(int64(m.ComputeSlices()), resource.DecimalSI)},
		CounterMedia:   {Value: *resource.NewQuantity(1, resource.DecimalSI)},
	}
	for i := range m.MemorySlices() {
		c[MemorySliceCounter(i)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return resourceapi.CounterSet{Name: CounterSetName(g.Index), Counters: c}
}

func one() resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
}

func migDevice(g GPU, d mig.DRADevice) resourceapi.Device {
	m := g.State.Model()
	p, pl := d.Profile, d.Placement
	use := map[string]resourceapi.Counter{
		CounterCompute: {Value: *resource.NewQuantity(int64(p.ComputeSlices), resource.DecimalSI)},
	}
	for i := pl.Start; i < pl.Start+pl.Size; i++ {
		use[MemorySliceCounter(i)] = one()
	}
	if p.MediaExtensions {
		use[CounterMedia] = one()
	}
	memMiB := int64(m.MemoryMiB()) * int64(pl.Size) / int64(m.MemorySlices())
	return resourceapi.Device{
		Name: DeviceName(g.Index, p, pl),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:           {StringValue: ptr.To("mig")},
			AttrProfile:        {StringValue: ptr.To(p.Name)},
			AttrGPUUUID:        {StringValue: ptr.To(g.UUID)},
			AttrGPUIndex:       {IntValue: ptr.To(int64(g.Index))},
			AttrModel:          {StringValue: ptr.To(m.String())},
			AttrPlacementStart: {IntValue: ptr.To(int64(pl.Start))},
			AttrPlacementSize:  {IntValue: ptr.To(int64(pl.Size))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: *resource.NewQuantity(memMiB<<20, resource.BinarySI)},
		},
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: CounterSetName(g.Index), Counters: use}},
	}
}

// wholeDevice is the GPU as one device. On a switchable GPU it consumes every counter of the
// GPU's counter set (all compute slices, every memory slice, the media engine), so it fits only
// while no MIG device of the GPU is allocated, and none fits while it is.
func wholeDevice(g GPU) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:     {StringValue: ptr.To("gpu")},
		AttrGPUUUID:  {StringValue: ptr.To(g.UUID)},
		AttrGPUIndex: {IntValue: ptr.To(int64(g.Index))},
	}
	d := resourceapi.Device{Name: WholeGPUDeviceName(g.Index), Attributes: attrs}
	m := g.State.Model()
	if !m.Valid() {
		return d
	}
	attrs[AttrModel] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.String())}
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityMemory: {Value: *resource.NewQuantity(int64(m.MemoryMiB())<<20, resource.BinarySI)},
	}
	if g.Switchable {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: CounterSetName(g.Index), Counters: counterSet(g).Counters}}
	}
	return d
}
