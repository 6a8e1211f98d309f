package migdra

import (
	"math/rand/v2"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/slicer-operator/slicer/internal/mig"
)

// walk returns a random reachable occupancy of one GPU of model m.
func walk(rng *rand.Rand, m mig.Model) mig.GPUState {
	s := mig.EmptyGPU(m)
	profs := m.Profiles()
	for range rng.IntN(10) {
		p := profs[rng.IntN(len(profs))]
		if rng.IntN(4) == 0 {
			if in := s.Instances(); len(in) > 0 {
				x := in[rng.IntN(len(in))]
				xp, _ := m.Profile(x.Profile)
				s, _ = s.Release(xp, x.Placement)
				continue
			}
		}
		if c := s.Candidates(p); len(c) > 0 {
			s, _ = s.Take(p, c[rng.IntN(len(c))])
		}
	}
	return s
}

// The counters are exact: with the counters of the GPU's existing instances consumed, a
// device fits by its counters exactly when internal/mig can take its placement. This is what
// lets the stock allocator place MIG slices without knowing MIG.
func TestCountersAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, m := range mig.Models() {
		for range 300 {
			st := walk(rng, m)
			pool, err := Pool([]GPU{{Index: 0, UUID: "GPU-0", State: st, MIGEnabled: true, Healthy: true}}, mig.NameOrder)
			if err != nil {
				t.Fatal(err)
			}
			avail := map[string]int64{}
			byName := map[string]resourceapi.Device{}
			for _, sl := range pool.Slices {
				for _, cs := range sl.SharedCounters {
					for n, c := range cs.Counters {
						avail[n] += c.Value.Value()
					}
				}
				for _, d := range sl.Devices {
					byName[d.Name] = d
				}
			}
			for _, in := range st.Instances() {
				p, _ := m.Profile(in.Profile)
				d, ok := byName[DeviceName(0, p, in.Placement)]
				if !ok {
					t.Fatalf("%s: no device for the existing %s at %v", m, p.Name, in.Placement)
				}
				for n, c := range d.ConsumesCounters[0].Counters {
					avail[n] -= c.Value.Value()
				}
			}
			for _, p := range m.Profiles() {
				for _, start := range p.Starts {
					pl := mig.Placement{Start: start, Size: p.MemorySlices}
					d, ok := byName[DeviceName(0, p, pl)]
					if !ok {
						t.Fatalf("%s: no device for %s at %v", m, p.Name, pl)
					}
					fits := true
					for n, c := range d.ConsumesCounters[0].Counters {
						fits = fits && avail[n] >= c.Value.Value()
					}
					if fits != st.CanTake(p, pl) {
						t.Fatalf("%s in state %s: %s at %v fits by counters %v, CanTake %v", m, st, p.Name, pl, fits, st.CanTake(p, pl))
					}
				}
			}
		}
	}
}

// An 8 × H100 node stays within the API's limits: one counter slice of 8 sets, one slice per
// profile of at most 64 devices, DNS-label names, at most 32 attributes and capacities, and
// every device listed once. Sixteen GPUs split the counter sets and the 1g slices.
func TestPoolWithinAPILimits(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	for _, n := range []int{1, 8, 16} {
		var gpus []GPU
		for i := range n {
			gpus = append(gpus, GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), State: mig.EmptyGPU(h100), MIGEnabled: true, Healthy: true})
		}
		pool, err := Pool(gpus, mig.PreferredOrder)
		if err != nil {
			t.Fatal(err)
		}
		sets, devices := 0, map[string]bool{}
		perGPU := 0
		for _, p := range h100.Profiles() {
			perGPU += len(p.Starts)
		}
		for i, sl := range pool.Slices {
			if len(sl.SharedCounters) > 0 && len(sl.Devices) > 0 {
				t.Fatalf("%d GPUs: slice %d has counters and devices", n, i)
			}
			if len(sl.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets || len(sl.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
				t.Fatalf("%d GPUs: slice %d has %d counter sets, %d devices", n, i, len(sl.SharedCounters), len(sl.Devices))
			}
			sets += len(sl.SharedCounters)
			for _, cs := range sl.SharedCounters {
				if len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
					t.Fatalf("counter set %s has %d counters", cs.Name, len(cs.Counters))
				}
			}
			profile := ""
			for _, d := range sl.Devices {
				if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
					t.Fatalf("device name %q: %v", d.Name, errs)
				}
				if len(d.Attributes)+len(d.Capacity) > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					t.Fatalf("device %s has %d attributes and capacities", d.Name, len(d.Attributes)+len(d.Capacity))
				}
				if devices[d.Name] {
					t.Fatalf("device %s listed twice", d.Name)
				}
				devices[d.Name] = true
				p := *d.Attributes[AttrProfile].StringValue
				if profile != "" && p != profile {
					t.Fatalf("slice %d mixes profiles %s and %s", i, profile, p)
				}
				profile = p
			}
		}
		if sets != n || len(devices) != n*perGPU {
			t.Fatalf("%d GPUs: %d counter sets, %d devices; want %d, %d", n, sets, len(devices), n, n*perGPU)
		}
	}
}

// Whole-GPU and unhealthy GPUs: a GPU in whole-GPU mode is one device with no counters, an
// unhealthy one is not published, and a duplicate index is refused.
func TestPoolWholeAndUnhealthyGPUs(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	pool, err := Pool([]GPU{
		{Index: 0, UUID: "GPU-a", State: mig.EmptyGPU(h100), MIGEnabled: false, Healthy: true},
		{Index: 1, UUID: "GPU-b", State: mig.EmptyGPU(h100), MIGEnabled: true, Healthy: false},
	}, mig.NameOrder)
	if err != nil {
		t.Fatal(err)
	}
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 1 || pool.Slices[0].Devices[0].Name != "gpu-0" ||
		len(pool.Slices[0].Devices[0].ConsumesCounters) != 0 {
		t.Fatalf("want one whole-GPU device gpu-0, got %+v", pool.Slices)
	}
	if _, err := Pool([]GPU{{Index: 2}, {Index: 2}}, mig.NameOrder); err == nil {
		t.Fatal("a duplicate GPU index was accepted")
	}
}

// In Slicer's order, the first device of a profile's slice that fits is the Slicer policy's
// choice for the node's occupancy (the allocator tries a class's devices in that order).
func TestPreferredSliceOrder(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	rng := rand.New(rand.NewPCG(9, 9))
	for range 100 {
		var gpus []GPU
		node := mig.Node{}
		for i := range 8 {
			st := walk(rng, h100)
			gpus = append(gpus, GPU{Index: i, UUID: "GPU", State: st, MIGEnabled: true, Healthy: true})
			node.GPUs = append(node.GPUs, mig.GPU{State: st, Usable: true})
		}
		pool, err := Pool(gpus, mig.PreferredOrder)
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range pool.Slices {
			if len(sl.Devices) == 0 {
				continue
			}
			p, _ := h100.Profile(*sl.Devices[0].Attributes[AttrProfile].StringValue)
			as, err := mig.Place(node, mig.MustRequest(mig.RequestItem{Profile: p.Name, Count: 1}))
			for _, d := range sl.Devices {
				g := int(*d.Attributes[AttrGPUIndex].IntValue)
				pl := mig.Placement{Start: int(*d.Attributes[AttrPlacementStart].IntValue), Size: p.MemorySlices}
				if !gpus[g].State.CanTake(p, pl) {
					continue
				}
				if err != nil || as[0].GPU != g || as[0].Placement != pl {
					t.Fatalf("%s: first fitting device %s, Slicer places %v (%v)", p.Name, d.Name, as, err)
				}
				break
			}
		}
	}
}

// A profile newer than the node's driver (A100-40GB 1g.10gb needs R525, 1g.5gb+me R470) has
// no device in the pool; a driver with no version published has them all.
func TestPoolLeavesOutProfilesTheDriverLacks(t *testing.T) {
	a100, _ := mig.ParseModel("A100-40GB")
	profiles := func(driver string) map[string]bool {
		t.Helper()
		pool, err := Pool([]GPU{{Index: 0, UUID: "GPU-a", State: mig.EmptyGPU(a100), MIGEnabled: true, Healthy: true, Driver: driver}}, mig.NameOrder)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, sl := range pool.Slices {
			for _, d := range sl.Devices {
				if a := d.Attributes[AttrProfile]; a.StringValue != nil {
					out[*a.StringValue] = true
				}
			}
		}
		return out
	}
	for driver, want := range map[string]map[string]bool{
		"460.106.00": {"1g.5gb+me": false, "1g.10gb": false, "1g.5gb": true, "7g.40gb": true},
		"470.256.02": {"1g.5gb+me": true, "1g.10gb": false},
		"525.85.12":  {"1g.5gb+me": true, "1g.10gb": true},
		"":           {"1g.5gb+me": true, "1g.10gb": true},
	} {
		got := profiles(driver)
		for p, w := range want {
			if got[mig.LegalProfileName(p)] != w && got[p] != w {
				t.Errorf("driver %q: devices of %s published = %v, want %v (published: %v)", driver, p, !w, w, got)
			}
		}
	}
}
