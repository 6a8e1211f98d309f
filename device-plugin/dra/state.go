package dra

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// The plugin keeps no state of its own that a restart could lose. What is prepared is
// derived from three sources, each read when needed:
//   - NVML: the MIG instances on each GPU, each at a (GPU, profile, placement);
//   - the API: every ResourceClaim whose status.allocation names a device of this driver and
//     this node's pool, from the claim informer's memory (claims.go says how its lag is
//     covered); a device name is a (GPU index, profile, placement), so the instance a claim
//     owns is the one at its device's placement;
//   - the claim's CDI spec on disk, written by Prepare, which records the MIG devices handed
//     out, the claim and its pods, so Unprepare can undo a claim the API has already
//     forgotten, and no other claim is prepared onto them meanwhile (record.go).
// An instance that no allocated claim explains is an orphan; it is destroyed after a grace
// period (the time since it was first seen as an orphan), never at once: a claim allocated a
// moment ago may not be visible yet (engine.OrphanClock, the device-plugin frontend's clock too).

// allocated is one device of this driver and pool in a claim's allocation: a MIG device (Ref)
// or a whole GPU (Whole), on GPU index GPU.
type allocated struct {
	Request string
	Device  string
	GPU     int
	Whole   bool
	Ref     migdra.DeviceRef
}

// claimDevices lists the claim's devices of this driver in pool (the node's name).
func claimDevices(c *resourceapi.ResourceClaim, pool string) ([]allocated, error) {
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	var out []allocated
	for _, r := range migdra.AllocatedDevices(c, pool) {
		if i, ok := migdra.ParseWholeDeviceName(r.Device); ok {
			out = append(out, allocated{Request: r.Request, Device: r.Device, GPU: i, Whole: true})
			continue
		}
		ref, err := migdra.ParseDeviceName(r.Device)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		out = append(out, allocated{Request: r.Request, Device: r.Device, GPU: ref.GPU, Ref: ref})
	}
	return out, nil
}

// explained maps each device name of this pool that some allocated claim holds to the UIDs
// of the claims holding it (one, unless something went wrong).
func explained(claims []*resourceapi.ResourceClaim, pool string) map[string][]string {
	out := map[string][]string{}
	for _, c := range claims {
		for _, r := range migdra.AllocatedDevices(c, pool) {
			out[r.Device] = append(out[r.Device], string(c.UID))
		}
	}
	return out
}

// sliceDevice is the DRA device name of an observed slice on GPU g.
func sliceDevice(g *engine.GPU, s engine.Slice) (string, bool) {
	p, err := g.Model.Profile(s.Profile)
	if err != nil {
		return "", false
	}
	return migdra.DeviceName(g.Index, p, s.Placement), true
}

// gpuByIndex is the observed GPU with NVML index i.
func gpuByIndex(o *engine.Observation, i int) *engine.GPU {
	for _, g := range o.GPUs {
		if g.Index == i {
			return g
		}
	}
	return nil
}

// resolve is the slot a device reference names on the observed node.
func resolve(o *engine.Observation, ref migdra.DeviceRef) (mig.Slot, error) {
	g := gpuByIndex(o, ref.GPU)
	if why := g.Unusable(); why != "" {
		return mig.Slot{}, fmt.Errorf("device on GPU %d: %s", ref.GPU, why)
	}
	p, pl, err := ref.Resolve(g.Model)
	if err != nil {
		return mig.Slot{}, err
	}
	return mig.Slot{GPU: g.UUID, Profile: p.Name, Placement: pl}, nil
}

// step is what Prepare does for one allocated device (engine.AtSlot).
type step = engine.SlotStep

const (
	stepReuse   = engine.SlotReuse   // a complete instance is at the slot
	stepFinish  = engine.SlotFinish  // a GPU instance without compute instance is at the slot
	stepCreate  = engine.SlotCreate  // the slot is free
	stepBlocked = engine.SlotBlocked // another instance overlaps the slot
)

// decide finds what to do for slot among the GPU's instances: engine.AtSlot, the decision the
// device-plugin frontend's plan takes for a slot too, with the instance it names.
func decide(instances []engine.Slice, slot mig.Slot) (step, engine.Slice) {
	st, i := engine.AtSlot(instances, slot)
	if i < 0 {
		return st, engine.Slice{}
	}
	return st, instances[i]
}

// orphans lists the device names of the observed slices that no allocated claim explains and
// no record keeps (kept), sorted.
func orphans(o *engine.Observation, held map[string][]string, kept map[string]bool) []string {
	var out []string
	for _, g := range o.GPUs {
		for _, s := range g.Slices {
			if name, ok := sliceDevice(g, s); ok && len(held[name]) == 0 && !kept[name] {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}
