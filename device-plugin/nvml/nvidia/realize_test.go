package nvidia_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia/nvidiamock"
	"github.com/slicer-operator/slicer/internal/mig"
)

func observe(t *testing.T, lib nvml.Library, m *engine.Metrics) (*engine.Observation, *engine.GPU) {
	t.Helper()
	obs, err := engine.Observe(lib, m)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if len(obs.GPUs) != 1 {
		t.Fatalf("observed %d GPUs, want 1", len(obs.GPUs))
	}
	return obs, obs.GPUs[0]
}

func slots(g *engine.GPU) []mig.Slot {
	var out []mig.Slot
	for _, s := range g.Slices {
		out = append(out, s.Slot)
	}
	return out
}

// The agent's realize path, as both frontends call it (engine.Observe, then the observation's
// CreateSlice, FinishSlice and DestroySlice, observing again after each change), on the real
// adapter over NVIDIA's mock of the three Ampere models.
func TestRealizeOnNVIDIAMock(t *testing.T) {
	for _, tc := range []struct {
		config string
		model  mig.Model
	}{
		{"A100-40GB", mig.A100_40GB},
		{"A100-80GB", mig.A100_80GB},
		{"A30-24GB", mig.A30_24GB},
	} {
		t.Run(tc.config, func(t *testing.T) {
			lib, mock := mockLibrary(t, tc.config)
			metrics := engine.NewMetrics(prometheus.NewRegistry())
			obs, g := observe(t, lib, metrics)
			if obs.DriverVersion == "" || g.Model != tc.model || !g.MIGReady() || !g.Healthy || len(g.Slices) != 0 {
				t.Fatalf("observed driver %q, GPU %+v; want an empty, healthy %s in MIG mode", obs.DriverVersion, g, tc.model)
			}

			// Every profile at every placement, one at a time.
			for _, p := range tc.model.Profiles() {
				for _, pl := range p.Placements() {
					slot := mig.Slot{GPU: g.UUID, Profile: p.Name, Placement: pl}
					s, err := obs.CreateSlice(slot, metrics)
					if err != nil || !s.Complete() || s.Slot != slot {
						t.Fatalf("CreateSlice(%s) = %+v, %v", slot, s, err)
					}
					obs, g = observe(t, lib, metrics)
					if len(g.Slices) != 1 || g.Slices[0] != s {
						t.Fatalf("after creating %s observed %+v, want %+v", slot, g.Slices, s)
					}
					if err := obs.DestroySlice(g.Slices[0], metrics); err != nil {
						t.Fatalf("DestroySlice(%s): %v", slot, err)
					}
					if obs, g = observe(t, lib, metrics); len(g.Slices) != 0 {
						t.Fatalf("after destroying %s observed %+v", slot, g.Slices)
					}
				}
			}

			// Several slices on one GPU: each profile but the whole-GPU one, largest first, at
			// its highest placement still free.
			state := mig.EmptyGPU(tc.model)
			var want []mig.Slot
			ps := tc.model.Profiles()
			for i := len(ps) - 1; i >= 0; i-- {
				p := ps[i]
				cands := state.Candidates(p)
				if p.MemorySlices == tc.model.MemorySlices() || len(cands) == 0 {
					continue
				}
				slot := mig.Slot{GPU: g.UUID, Profile: p.Name, Placement: cands[len(cands)-1]}
				var err error
				if state, err = state.Take(p, slot.Placement); err != nil {
					t.Fatal(err)
				}
				if _, err := obs.CreateSlice(slot, metrics); err != nil {
					t.Fatalf("CreateSlice(%s) on [%s]: %v", slot, state, err)
				}
				want = append(want, slot)
				obs, g = observe(t, lib, metrics)
			}
			if len(want) < 2 {
				t.Fatalf("laid out %v, want several slices", want)
			}
			byStart := func(a, b mig.Slot) int { return a.Placement.Start - b.Placement.Start }
			slices.SortFunc(want, byStart)
			if diff := cmp.Diff(want, slots(g)); diff != "" {
				t.Fatalf("observed layout (-created +observed):\n%s", diff)
			}

			// What the driver refuses reaches the caller as NVML's code.
			taken := want[0]
			if _, err := obs.CreateSlice(taken, metrics); !nvml.IsInsufficientResources(err) {
				t.Errorf("CreateSlice over %s: %v, want ERROR_INSUFFICIENT_RESOURCES", taken, err)
			}
			busy := g.Slices[0]
			mock.Mock(0).SetInUse(busy.MIGUUID, true)
			if err := obs.DestroySlice(busy, metrics); !nvml.IsInUse(err) {
				t.Errorf("DestroySlice of a MIG device in use: %v, want ERROR_IN_USE", err)
			}
			mock.Mock(0).SetInUse(busy.MIGUUID, false)

			// Empty the GPU, then recover a GPU instance left without its compute instance.
			obs, g = observe(t, lib, metrics)
			for _, s := range g.Slices {
				if err := obs.DestroySlice(s, metrics); err != nil {
					t.Fatalf("DestroySlice(%s): %v", s.Slot, err)
				}
			}
			p := tc.model.Profiles()[0]
			dev, err := lib.Device(0)
			if err != nil {
				t.Fatal(err)
			}
			info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: p.Starts[0], Size: p.MemorySlices}); err != nil {
				t.Fatal(err)
			}
			obs, g = observe(t, lib, metrics)
			if len(g.Slices) != 1 || g.Slices[0].Complete() {
				t.Fatalf("a bare GPU instance observed as %+v", g.Slices)
			}
			s, err := obs.FinishSlice(g.Slices[0], metrics)
			if err != nil || !s.Complete() {
				t.Fatalf("FinishSlice = %+v, %v", s, err)
			}
			obs, g = observe(t, lib, metrics)
			if len(g.Slices) != 1 || g.Slices[0] != s {
				t.Fatalf("after FinishSlice observed %+v, want %+v", g.Slices, s)
			}
			if err := obs.DestroySlice(s, metrics); err != nil {
				t.Fatal(err)
			}
			if n := mock.Mock(0).Instances(); n != 0 {
				t.Errorf("%d GPU instances left on the mock", n)
			}
		})
	}
}

// A GPU whose PCI id is an A100-40GB's but whose memory is not is no model: the agent observes
// it, says why, and makes nothing there; the A100 beside it is served.
func TestObserveLeavesAnUnrecognizedGPUAlone(t *testing.T) {
	odd := nvidiamock.Configs["A100-40GB"]
	odd.Name, odd.MemoryMB = "NVIDIA A100-SXM4-64GB", 65536
	m, err := nvidiamock.New(nvidiamock.Configs["A100-40GB"], odd)
	if err != nil {
		t.Fatal(err)
	}
	m.Mock(0).EnableMIG()
	m.Mock(1).EnableMIG()
	lib := nvidia.FromInterface(m)
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	obs, err := engine.Observe(lib, engine.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	good, bad := obs.GPUs[0], obs.GPUs[1]
	if !good.MIGReady() || good.Unrecognized != nil {
		t.Errorf("the A100-40GB: %+v", good)
	}
	if bad.Model.Valid() || bad.MIGReady() || bad.Unrecognized == nil || bad.Unrecognized.Reason != mig.MemoryMismatch || !bad.MIGSupported {
		t.Errorf("the 64 GB part: model %v, unrecognized %v, MIG %v", bad.Model, bad.Unrecognized, bad.MIGSupported)
	}
	if _, err := obs.CreateSlice(mig.Slot{GPU: bad.UUID, Profile: "1g.5gb", Placement: mig.Placement{Start: 0, Size: 1}}, engine.NewMetrics(prometheus.NewRegistry())); err == nil {
		t.Error("created a slice on a GPU that is no model")
	}
	if n := m.Mock(1).Instances(); n != 0 {
		t.Errorf("%d GPU instances on the unrecognised GPU", n)
	}
}

// A profile newer than the node's driver is refused before NVML is asked (ERROR_NOT_SUPPORTED,
// which the device-plugin agent turns into a Failed allocation): A100-40GB 1g.10gb needs R525.
func TestRealizeRefusesAProfileTheDriverLacks(t *testing.T) {
	lib, mock := mockLibrary(t, "A100-40GB")
	mock.Server().DriverVersion = "470.256.02"
	metrics := engine.NewMetrics(prometheus.NewRegistry())
	obs, g := observe(t, lib, metrics)
	_, err := obs.CreateSlice(mig.Slot{GPU: g.UUID, Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 2}}, metrics)
	if nvml.ReturnOf(err) != nvml.ErrorNotSupported || mock.Mock(0).Instances() != 0 {
		t.Fatalf("1g.10gb on R470: %v (%d instances), want ERROR_NOT_SUPPORTED and none", err, mock.Mock(0).Instances())
	}
	if _, err := obs.CreateSlice(mig.Slot{GPU: g.UUID, Profile: "1g.5gb", Placement: mig.Placement{Start: 0, Size: 1}}, metrics); err != nil {
		t.Fatalf("1g.5gb on R470: %v", err)
	}
}
