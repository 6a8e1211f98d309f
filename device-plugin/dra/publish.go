package dra

import (
	"slices"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// poolGPUs is the node's GPUs as the pool publishes them. A GPU's occupancy, which orders its
// devices (mig.PreferredOrder), is its MIG instances plus the devices allocated claims hold
// that are not realized yet (the allocator counts those too). Allocations that do not fit
// beside the instances are left out of the order (the counters still keep them apart).
func poolGPUs(o *engine.Observation, held map[string][]string) []migdra.GPU {
	out := make([]migdra.GPU, 0, len(o.GPUs))
	for _, g := range o.GPUs {
		mg := migdra.GPU{Index: g.Index, UUID: g.UUID, Healthy: g.Healthy, MIGEnabled: g.MIGMode == nvml.MIGEnabled, Driver: o.DriverVersion}
		if g.MIGReady() {
			mg.State = occupancy(g, held)
		}
		out = append(out, mg)
	}
	return out
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

// published is what the plugin last published: the GPUs' identity and the device order.
type published struct {
	shape   []gpuShape
	devices []mig.DRADevice
}

// gpuShape is what of a GPU changes the pool's devices themselves (not only their order).
type gpuShape struct {
	Index      int
	UUID       string
	Model      mig.Model
	MIGEnabled bool
	Healthy    bool
}

// node is the mig view of the GPUs migdra.Pool lists as MIG GPUs, in its order.
func node(gpus []migdra.GPU) mig.Node {
	var n mig.Node
	for _, g := range gpus {
		if g.Healthy && g.MIGEnabled && g.State.Valid() {
			n.GPUs = append(n.GPUs, mig.GPU{State: g.State, Usable: true})
		}
	}
	return n
}

func shape(gpus []migdra.GPU) []gpuShape {
	out := make([]gpuShape, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, gpuShape{Index: g.Index, UUID: g.UUID, Model: g.State.Model(), MIGEnabled: g.MIGEnabled, Healthy: g.Healthy})
	}
	return out
}

// republish decides whether the pool must be written again for gpus, and returns what would
// then be published. It must when nothing was published, when a GPU appeared, went, changed
// health or mode, or when, for some profile, the device the stock allocator takes (the first
// that fits in the published order) is not the one the preferred order for the current
// occupancy puts first: a change of order that leaves every first pick alone is not written
// (the rule cmd/slicer-sim/sim/dra.go measures).
func republish(prev *published, gpus []migdra.GPU) (bool, published) {
	n := node(gpus)
	next := published{shape: shape(gpus), devices: mig.Devices(n, mig.PreferredOrder)}
	if prev == nil || !slices.Equal(prev.shape, next.shape) {
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
