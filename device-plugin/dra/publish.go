package dra

import (
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// poolGPUs is the node's GPUs as the pool publishes them. A GPU's occupancy, which orders its
// devices (mig.PreferredOrder), is its MIG instances plus the devices allocated claims hold
// that are not realized yet (the allocator counts those too). Allocations that do not fit
// beside the instances are left out of the order (the counters still keep them apart). An
// unhealthy MIG GPU stays in the pool, its devices tainted (unhealthy); an unhealthy GPU
// that is not (or cannot be seen to be) in MIG mode is left out. With mode policies (modes,
// by UUID; whole.go), a GPU the driver may switch is published whole and sliced, and one
// whose fixed policy is not its mode yet is left out until it is switched.
func poolGPUs(o *engine.Observation, held map[string][]string, modes map[string]migapi.ModePolicy) []migdra.GPU {
	out := make([]migdra.GPU, 0, len(o.GPUs))
	for _, g := range o.GPUs {
		mg := migdra.GPU{Index: g.Index, UUID: g.UUID, Healthy: g.Healthy || g.MIGReady(), MIGEnabled: g.MIGMode == nvml.MIGEnabled, Driver: o.DriverVersion}
		p, hasPolicy := modes[g.UUID]
		switch {
		case hasPolicy && policyHides(g, p):
			continue
		case hasPolicy && modeSwitchable(g, p):
			mg.Switchable, mg.State = true, occupancy(g, held)
		case g.MIGReady():
			mg.State = occupancy(g, held)
		case g.Model.Valid() && g.Err == nil:
			mg.State = mig.EmptyGPU(g.Model) // a whole GPU of a MIG model: its model and memory are attributes
		}
		out = append(out, mg)
	}
	return out
}

// TaintUnhealthy is the key of the taint on a device that is unhealthy: a device of an
// unhealthy GPU (value "gpu") or the device of an MIG instance an XID broke ("instance"),
// with effect NoSchedule: no new claim is allocated it, and the pods running on it are not
// evicted (the kubelet's health stream tells them, and an Event).
const TaintUnhealthy = "slicer.dev/unhealthy"

// unhealthy are the devices the pool taints: the MIG GPUs that are unhealthy, by index, and
// the devices of the instances that are, by name.
type unhealthy struct {
	GPUs    map[int]bool
	Devices map[string]bool
}

// unhealthyOf is what of the observation the pool taints.
func unhealthyOf(o *engine.Observation) unhealthy {
	u := unhealthy{GPUs: map[int]bool{}, Devices: map[string]bool{}}
	for _, g := range o.GPUs {
		if !g.MIGReady() {
			continue
		}
		if !g.Healthy {
			u.GPUs[g.Index] = true
		}
		for _, s := range g.Slices {
			if name, ok := sliceDevice(g, s); ok && s.Unhealthy != "" {
				u.Devices[name] = true
			}
		}
	}
	return u
}

// taint adds the unhealthy taint to each device of pool that u names.
func taint(pool *resourceslice.Pool, u unhealthy) {
	for i := range pool.Slices {
		for j := range pool.Slices[i].Devices {
			dev := &pool.Slices[i].Devices[j]
			value := ""
			if i, err := migdra.DeviceGPU(dev.Name); err == nil && u.GPUs[i] {
				value = "gpu"
			} else if u.Devices[dev.Name] {
				value = "instance"
			}
			if value != "" {
				dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{Key: TaintUnhealthy, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule})
			}
		}
	}
}

// occupancy is mig.Occupancy of g's instances, then of the devices held on it in name order,
// each left out when it does not fit beside those before it.
func occupancy(g *engine.GPU, held map[string][]string) mig.GPUState {
	occ := g.AppendOccupants(make([]mig.Occupant, 0, len(g.Slices)+len(held)))
	names := make([]string, 0, len(held))
	for name := range held {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ref, err := migdra.ParseDeviceName(name)
		if err != nil || ref.GPU != g.Index {
			continue
		}
		p, pl, err := ref.Resolve(g.Model)
		if err != nil {
			continue
		}
		occ = append(occ, mig.Occupant{Instance: mig.Instance{Profile: p.Name, Placement: pl}})
	}
	st, _ := mig.Occupancy(g.Model, occ, mig.SkipMisfits) // an unknown model: the zero state, as EmptyGPU gives
	return st
}

// published is what the plugin last published: the GPUs' identity, the device order and the
// unhealthy devices.
type published struct {
	shape   []gpuShape
	devices []mig.DRADevice
	sick    unhealthy
}

// gpuShape is what of a GPU changes the pool's devices themselves (not only their order).
type gpuShape struct {
	Index      int
	UUID       string
	Model      mig.Model
	MIGEnabled bool
	Switchable bool
	Healthy    bool
}

// node is the mig view of the GPUs migdra.Pool lists as MIG GPUs, in its order.
func node(gpus []migdra.GPU) mig.Node {
	var n mig.Node
	for _, g := range gpus {
		if g.Healthy && migdra.PublishesMIGDevices(g) {
			n.GPUs = append(n.GPUs, mig.GPU{State: g.State, Usable: true})
		}
	}
	return n
}

func shape(gpus []migdra.GPU) []gpuShape {
	out := make([]gpuShape, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, gpuShape{Index: g.Index, UUID: g.UUID, Model: g.State.Model(), MIGEnabled: g.MIGEnabled, Switchable: g.Switchable, Healthy: g.Healthy})
	}
	return out
}

// republish decides whether the pool must be written again for gpus with the sick devices
// tainted, and returns what would then be published. It must when nothing was published, when
// a GPU appeared, went, changed health or mode, when a device's taint changed, or when, for
// some profile, the device the stock allocator takes (the first
// that fits in the published order) is not the one the preferred order for the current
// occupancy puts first: a change of order that leaves every first pick alone is not written
// (the rule cmd/slicer-sim/sim/dra.go measures).
func republish(prev *published, gpus []migdra.GPU, sick unhealthy) (bool, published) {
	n := node(slices.DeleteFunc(slices.Clone(gpus), func(g migdra.GPU) bool { return sick.GPUs[g.Index] }))
	next := published{shape: shape(gpus), devices: mig.Devices(n, mig.PreferredOrder), sick: sick}
	if prev == nil || !slices.Equal(prev.shape, next.shape) || !maps.Equal(prev.sick.GPUs, sick.GPUs) || !maps.Equal(prev.sick.Devices, sick.Devices) {
		return true, next
	}
	seen := map[string]bool{}
	for _, g := range n.GPUs {
		for _, p := range g.State.Model().Profiles() {
			if seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			a, okA := mig.FirstFitting(n, prev.devices, p.Name)
			b, okB := mig.FirstFitting(n, next.devices, p.Name)
			if okA != okB || a.GPU != b.GPU || a.Placement != b.Placement {
				return true, next
			}
		}
	}
	return false, next
}
