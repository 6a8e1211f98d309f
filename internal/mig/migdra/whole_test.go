package migdra

import (
	"math/rand/v2"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/internal/mig"
)

// counterPool is what the stock allocator knows of a pool: each counter set's counters left,
// and each device's consumption. It allocates a device only if every counter it consumes is
// left, as the allocator's partitionable-devices check does.
type counterPool struct {
	left    map[string]map[string]int64
	devices map[string]resourceapi.Device
}

func newCounterPool(t *testing.T, gpus []GPU) counterPool {
	t.Helper()
	pool, err := Pool(gpus, mig.NameOrder)
	if err != nil {
		t.Fatal(err)
	}
	cp := counterPool{left: map[string]map[string]int64{}, devices: map[string]resourceapi.Device{}}
	for _, sl := range pool.Slices {
		for _, cs := range sl.SharedCounters {
			cp.left[cs.Name] = map[string]int64{}
			for n, c := range cs.Counters {
				cp.left[cs.Name][n] = c.Value.Value()
			}
		}
		for _, d := range sl.Devices {
			if _, dup := cp.devices[d.Name]; dup {
				t.Fatalf("device %s published twice", d.Name)
			}
			cp.devices[d.Name] = d
		}
	}
	return cp
}

func (cp counterPool) fits(d resourceapi.Device) bool {
	for _, use := range d.ConsumesCounters {
		for n, c := range use.Counters {
			if cp.left[use.CounterSet][n] < c.Value.Value() {
				return false
			}
		}
	}
	return true
}

func (cp counterPool) allocate(d resourceapi.Device) {
	for _, use := range d.ConsumesCounters {
		for n, c := range use.Counters {
			cp.left[use.CounterSet][n] -= c.Value.Value()
		}
	}
}

// A switchable GPU's whole device and its MIG devices are mutually exclusive by their counters
// alone, for every model, in either mode, on random occupancies: the allocator picks devices at
// random wherever their counters fit, and the picks are always either the whole GPU alone or
// MIG devices that internal/mig can place together.
func TestWholeDeviceExcludesItsSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 6))
	for _, m := range mig.Models() {
		for trial := range 200 {
			st := walk(rng, m)
			enabled := rng.IntN(2) == 0
			cp := newCounterPool(t, []GPU{{Index: 0, UUID: "GPU-0", State: st, MIGEnabled: enabled, Switchable: true, Healthy: true}})
			whole, ok := cp.devices[WholeGPUDeviceName(0)]
			if !ok {
				t.Fatalf("%s: a switchable GPU has no whole device", m)
			}
			if q := whole.Capacity[CapacityMemory].Value; q.Value() != int64(m.MemoryMiB())<<20 {
				t.Fatalf("%s: whole device memory %s", m, q.String())
			}
			// The allocated claims are the occupancy's instances (as the driver publishes them).
			for _, in := range st.Instances() {
				p, _ := m.Profile(in.Profile)
				d, ok := cp.devices[DeviceName(0, p, in.Placement)]
				if !ok || !cp.fits(d) {
					t.Fatalf("%s: the existing %s at %v has no device that fits", m, p.Name, in.Placement)
				}
				cp.allocate(d)
			}
			if got, want := cp.fits(whole), len(st.Instances()) == 0; got != want {
				t.Fatalf("%s in state %s: whole device fits %v, want %v", m, st, got, want)
			}
			// Then the allocator's random picks, from every device whose counters fit.
			names := make([]string, 0, len(cp.devices))
			for n := range cp.devices {
				names = append(names, n)
			}
			wholeTaken, slices := false, st
			for range 12 {
				var fitting []string
				for _, n := range names {
					if cp.fits(cp.devices[n]) {
						fitting = append(fitting, n)
					}
				}
				if len(fitting) == 0 {
					break
				}
				n := fitting[rng.IntN(len(fitting))]
				cp.allocate(cp.devices[n])
				if n == WholeGPUDeviceName(0) {
					if wholeTaken || len(slices.Instances()) > 0 {
						t.Fatalf("%s trial %d: whole device allocated beside %s (whole already: %v)", m, trial, slices, wholeTaken)
					}
					wholeTaken = true
					continue
				}
				if wholeTaken {
					t.Fatalf("%s trial %d: MIG device %s allocated beside the whole GPU", m, trial, n)
				}
				ref, err := ParseDeviceName(n)
				if err != nil {
					t.Fatal(err)
				}
				p, pl, err := ref.Resolve(m)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.CanTake(p, pl) {
					t.Fatalf("%s trial %d: %s fits by counters in %s but not in internal/mig", m, trial, n, slices)
				}
				slices, _ = slices.Take(p, pl)
			}
		}
	}
}

// A GPU that is not switchable keeps its one mode's devices: in MIG mode no whole device, and
// in whole mode a whole device that consumes no counters and no MIG device.
func TestPoolFixedModeGPUsPublishOneMode(t *testing.T) {
	for _, m := range mig.Models() {
		cp := newCounterPool(t, []GPU{
			{Index: 0, UUID: "GPU-a", State: mig.EmptyGPU(m), MIGEnabled: true, Healthy: true},
			{Index: 1, UUID: "GPU-b", State: mig.EmptyGPU(m), MIGEnabled: false, Healthy: true},
		})
		if _, ok := cp.devices[WholeGPUDeviceName(0)]; ok {
			t.Fatalf("%s: a MIG GPU that may not switch has a whole device", m)
		}
		d, ok := cp.devices[WholeGPUDeviceName(1)]
		if !ok || len(d.ConsumesCounters) != 0 {
			t.Fatalf("%s: the whole-mode GPU's device %+v", m, d)
		}
		if _, ok := cp.left[CounterSetName(1)]; ok {
			t.Fatalf("%s: a whole-mode GPU that may not switch has a counter set", m)
		}
	}
}

// Sixteen switchable H100s stay within the API's limits with their whole devices: each slice
// of devices at most 64, every whole device beside its GPU's counter set.
func TestPoolSwitchableWithinAPILimits(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	var gpus []GPU
	for i := range 16 {
		gpus = append(gpus, GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), State: mig.EmptyGPU(h100), MIGEnabled: i%2 == 0, Switchable: true, Healthy: true})
	}
	pool, err := Pool(gpus, mig.PreferredOrder)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string]bool{}
	whole := 0
	for i, sl := range pool.Slices {
		if len(sl.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures || len(sl.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Fatalf("slice %d: %d devices, %d counter sets", i, len(sl.Devices), len(sl.SharedCounters))
		}
		for _, cs := range sl.SharedCounters {
			sets[cs.Name] = true
		}
		for _, d := range sl.Devices {
			if *d.Attributes[AttrType].StringValue == "gpu" {
				whole++
				if len(d.ConsumesCounters) != 1 || !sets[d.ConsumesCounters[0].CounterSet] {
					t.Fatalf("whole device %s consumes %+v; counter sets %v", d.Name, d.ConsumesCounters, sets)
				}
			}
		}
	}
	if whole != 16 || len(sets) != 16 {
		t.Fatalf("%d whole devices, %d counter sets; want 16, 16", whole, len(sets))
	}
}
