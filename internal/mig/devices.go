package mig

import (
	"sort"
)

// DRADevice is one device a Dynamic Resource Allocation driver publishes for MIG: one profile
// at one legal placement on one GPU of the node. With partitionable devices every such device
// consumes its GPU's shared counters, so the allocator can only pick devices that fit beside
// the ones already allocated.
type DRADevice struct {
	GPU       int
	Profile   Profile
	Placement Placement
}

// DeviceOrder is how a node's DRA devices are listed in its ResourceSlice. Kubernetes' stock
// allocator takes the first device of the request's class that fits, in that order, so for a
// driver the order is the placement policy.
type DeviceOrder uint8

const (
	// NameOrder lists devices by GPU, profile and start: what a driver that names each device
	// after its GPU, profile and placement and sorts by name publishes. The allocator then
	// always takes the first GPU and the lowest free placement (first fit).
	NameOrder DeviceOrder = iota
	// PreferredOrder lists each profile's devices best first for the node's current occupancy:
	// the devices that fit now by the Slicer policy's cost (least future placeability lost),
	// then the rest in name order. The first device that fits is the one Slicer's Place picks
	// for a one-slice request on that node. The order changes with occupancy, so a driver
	// republishes it after each change.
	PreferredOrder
)

var deviceOrderNames = [...]string{NameOrder: "name-order", PreferredOrder: "slicer-order"}

// Name is the order's name.
func (o DeviceOrder) Name() string {
	if int(o) < len(deviceOrderNames) {
		return deviceOrderNames[o]
	}
	return "DeviceOrder(?)"
}

// CanTake reports whether an instance of p can be created at pl now. Zero allocations.
func (s GPUState) CanTake(p Profile, pl Placement) bool {
	t := s.table()
	if t == nil || p.Model != s.model || int(p.index) >= len(t.profiles) || pl.Size != p.MemorySlices ||
		pl.Start < 0 || pl.Start >= maxStarts {
		return false
	}
	sl := t.slotOf[p.index][pl.Start]
	return sl != noSlot && t.take[int(s.idx)*t.nslots()+int(sl)] != noState
}

// Devices lists one device per (usable GPU, profile, legal placement) of the node, in the
// given order. The list is the same whatever the occupancy in NameOrder; in PreferredOrder it
// follows the occupancy (see PreferredOrder).
func Devices(node Node, order DeviceOrder) []DRADevice {
	type ranked struct {
		dev   DRADevice
		fits  bool
		cost  int64 // millionths of the empty GPU's V, as plan computes it
		free  int   // largest free aligned block left after taking it
		index int   // position in name order
	}
	var all []ranked
	for g, gpu := range node.GPUs {
		t := tableFor(gpu.State.model)
		if !gpu.slicesNow() || t == nil {
			continue
		}
		st := int(gpu.State.idx)
		for _, p := range t.profiles {
			for _, start := range p.Starts {
				r := ranked{dev: DRADevice{GPU: g, Profile: p, Placement: Placement{Start: start, Size: p.MemorySlices}}, index: len(all)}
				if next := t.take[st*t.nslots()+int(t.slotOf[p.index][start])]; next != noState {
					r.fits = true
					r.cost = int64(t.value[st]-t.value[next]) * 1e6 / int64(t.emptyValue)
					r.free = largestFreeBlock(t.used[next], t.spec.memorySlices)
				}
				all = append(all, r)
			}
		}
	}
	if order == PreferredOrder {
		// Grouped by profile name, so a class that selects one profile sees its devices best
		// first; the tie-breaks are plan's (lowest GPU) and derivePolicy's (largest free block
		// left, then the highest start).
		sort.SliceStable(all, func(i, j int) bool {
			a, b := all[i], all[j]
			if a.dev.Profile.Name != b.dev.Profile.Name {
				return a.dev.Profile.Name < b.dev.Profile.Name
			}
			if a.fits != b.fits {
				return a.fits
			}
			if !a.fits {
				return a.index < b.index
			}
			if a.cost != b.cost {
				return a.cost < b.cost
			}
			if a.dev.GPU != b.dev.GPU {
				return a.dev.GPU < b.dev.GPU
			}
			if a.free != b.free {
				return a.free > b.free
			}
			return a.dev.Placement.Start > b.dev.Placement.Start
		})
	} else {
		// Name order: GPU, profile name, start (the table lists starts in NVML order).
		sort.SliceStable(all, func(i, j int) bool {
			a, b := all[i].dev, all[j].dev
			if a.GPU != b.GPU {
				return a.GPU < b.GPU
			}
			if a.Profile.Name != b.Profile.Name {
				return a.Profile.Name < b.Profile.Name
			}
			return a.Placement.Start < b.Placement.Start
		})
	}
	out := make([]DRADevice, len(all))
	for i, r := range all {
		out[i] = r.dev
	}
	return out
}

// FirstFitting is the stock DRA allocator's choice for one device of a class that selects the
// profile named profile: the first device of that profile in the published order that fits
// beside what is allocated. It returns false when none fits.
func FirstFitting(node Node, devices []DRADevice, profile string) (DRADevice, bool) {
	for _, d := range devices {
		if d.Profile.Name == profile && d.GPU < len(node.GPUs) && node.GPUs[d.GPU].slicesNow() &&
			node.GPUs[d.GPU].State.CanTake(d.Profile, d.Placement) {
			return d, true
		}
	}
	return DRADevice{}, false
}
