package emulated_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvmltest"
	"github.com/slicer-operator/slicer/internal/mig"
)

func newBackend(t *testing.T, opts emulated.Options) *emulated.Backend {
	t.Helper()
	b, err := emulated.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	for _, m := range mig.Models() {
		t.Run(m.String(), func(t *testing.T) {
			nvmltest.Run(t, newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{m}}), 0, m)
		})
	}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		spec    string
		want    []mig.Model
		wantErr bool
	}{
		{spec: "H100-80GB:2", want: []mig.Model{mig.H100_80GB, mig.H100_80GB}},
		{spec: "A100-40GB:1,H200-141GB:1", want: []mig.Model{mig.A100_40GB, mig.H200_141GB}},
		{spec: "a30-24gb", want: []mig.Model{mig.A30_24GB}},
		{spec: "H100-80GB:0", wantErr: true},
		{spec: "H100-80GB:17", wantErr: true},
		{spec: "V100:1", wantErr: true},
		{spec: "", wantErr: true},
	}
	for _, tc := range tests {
		got, err := emulated.ParseSpec(tc.spec)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseSpec(%q) err = %v, wantErr %v", tc.spec, err, tc.wantErr)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseSpec(%q) (-want +got):\n%s", tc.spec, d)
		}
	}
}

// TestGeometryMatchesCore drives random create/destroy sequences and checks the
// emulator accepts exactly what internal/mig's GPUState accepts.
func TestGeometryMatchesCore(t *testing.T) {
	for _, m := range mig.Models() {
		b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{m}})
		dev, err := b.Device(0)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, uint64(m)))
		core := mig.EmptyGPU(m)
		type held struct {
			p  mig.Profile
			pl mig.Placement
			gi nvml.GPUInstance
		}
		var live []held
		for step := 0; step < 400; step++ {
			if len(live) > 0 && r.IntN(3) == 0 {
				i := r.IntN(len(live))
				h := live[i]
				if err := h.gi.Destroy(); err != nil {
					t.Fatalf("%s step %d: destroy: %v", m, step, err)
				}
				core, err = core.Release(h.p, h.pl)
				if err != nil {
					t.Fatal(err)
				}
				live = append(live[:i], live[i+1:]...)
				continue
			}
			ps := m.Profiles()
			p := ps[r.IntN(len(ps))]
			pl := mig.Placement{Start: p.Starts[r.IntN(len(p.Starts))], Size: p.MemorySlices}
			info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
			if err != nil {
				t.Fatal(err)
			}
			gi, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: pl.Start, Size: pl.Size})
			next, coreErr := core.Take(p, pl)
			switch {
			case coreErr == nil && err != nil:
				t.Fatalf("%s step %d: core accepts %s@%d on %s, emulator says %v", m, step, p.Name, pl.Start, core, err)
			case coreErr != nil && !nvml.IsInsufficientResources(err):
				t.Fatalf("%s step %d: core rejects %s@%d on %s (%v), emulator err = %v", m, step, p.Name, pl.Start, core, coreErr, err)
			case coreErr == nil:
				core = next
				live = append(live, held{p: p, pl: pl, gi: gi})
			}
		}
		if got := b.States()[0]; got != core {
			t.Errorf("%s: emulator state %s, core %s", m, got, core)
		}
	}
}

func TestErrors(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.H100_80GB}, MIGDisabled: []int{1}})
	dev, _ := b.Device(0)
	p, _ := mig.H100_80GB.Profile("3g.40gb")
	info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.CreateGPUInstanceWithPlacement(info, nvml.Placement{Start: 2, Size: 4}); nvml.ReturnOf(err) != nvml.ErrorInvalidArgument {
		t.Errorf("illegal placement: err = %v, want ERROR_INVALID_ARGUMENT", err)
	}
	uuid, err := b.CreateInstance(0, "3g.40gb", 4, false)
	if err != nil {
		t.Fatal(err)
	}
	gis, err := dev.GPUInstances(info)
	if err != nil || len(gis) != 1 {
		t.Fatalf("GPUInstances = %d, %v", len(gis), err)
	}
	cinfo, _ := gis[0].ComputeInstanceProfileInfo(p.ComputeInstanceProfile)
	cis, err := gis[0].ComputeInstances(cinfo)
	if err != nil || len(cis) != 1 {
		t.Fatalf("ComputeInstances = %d, %v", len(cis), err)
	}
	b.SetInUse(uuid, true)
	if err := cis[0].Destroy(); !nvml.IsInUse(err) {
		t.Errorf("destroy in-use CI: err = %v, want ERROR_IN_USE", err)
	}
	b.SetInUse(uuid, false)
	b.InjectFault(emulated.OpDestroyComputeInst, nvml.ErrorUnknown, 1)
	if err := cis[0].Destroy(); nvml.ReturnOf(err) != nvml.ErrorUnknown {
		t.Errorf("injected fault: err = %v", err)
	}
	if err := cis[0].Destroy(); err != nil {
		t.Errorf("destroy after fault: %v", err)
	}
	if err := gis[0].Destroy(); err != nil {
		t.Errorf("destroy GI: %v", err)
	}
	if err := gis[0].Destroy(); !nvml.IsNotFound(err) {
		t.Errorf("destroy destroyed GI: err = %v, want ERROR_NOT_FOUND", err)
	}
	dev1, _ := b.Device(1)
	if _, err := dev1.GPUInstanceProfileInfo(p.NVMLProfile); nvml.ReturnOf(err) != nvml.ErrorNotSupported {
		t.Errorf("MIG disabled: err = %v, want ERROR_NOT_SUPPORTED", err)
	}
	if cur, _, _ := dev1.MIGMode(); cur != nvml.MIGDisabled {
		t.Errorf("MIG mode of GPU 1 = %v", cur)
	}
	b.FailInit(nvml.ErrorDriverNotLoaded)
	if err := b.Init(); !nvml.IsDriverUnavailable(err) {
		t.Errorf("Init with injected driver fault: %v", err)
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeviceCount(); nvml.ReturnOf(err) != nvml.ErrorUninitialized {
		t.Errorf("DeviceCount after Shutdown: err = %v", err)
	}
}

func TestStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	opts := emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.A100_40GB}, StateFile: file}
	b := newBackend(t, opts)
	if _, err := b.CreateInstance(0, "1g.10gb+me", 6, false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInstance(1, "3g.20gb", 0, true); err != nil {
		t.Fatal(err)
	}
	want := b.Instances()
	restarted := newBackend(t, opts)
	if d := cmp.Diff(want, restarted.Instances()); d != "" {
		t.Errorf("after restart (-before +after):\n%s", d)
	}
	if err := restarted.Reboot(); err != nil {
		t.Fatal(err)
	}
	if got := newBackend(t, opts).Instances(); len(got) != 0 {
		t.Errorf("after reboot: %v", got)
	}
	if _, err := emulated.New(emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}, StateFile: file}); err == nil {
		t.Errorf("a state file for another GPU set was accepted")
	}
}

func TestListInstances(t *testing.T) {
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB}})
	u1, _ := b.CreateInstance(0, "4g.40gb", 0, false)
	if _, err := b.CreateInstance(0, "1g.10gb", 6, true); err != nil {
		t.Fatal(err)
	}
	dev, _ := b.Device(0)
	gi, ci := nvmltest.Profiles(mig.H100_80GB)
	got, err := nvml.ListInstances(dev, gi, ci)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[0].CIs) != 1 || got[0].CIs[0].MIGUUID != u1 || got[0].Placement != (nvml.Placement{Start: 0, Size: 4}) || len(got[1].CIs) != 0 {
		t.Errorf("ListInstances = %+v", got)
	}
}

func TestReadStateFileReturnsWhatTheBackendRecorded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	b := newBackend(t, emulated.Options{Node: "n1", GPUs: []mig.Model{mig.H100_80GB, mig.A100_40GB}, StateFile: file})
	u1, err := b.CreateInstance(0, "3g.40gb", 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateInstance(1, "1g.5gb", 2, true); err != nil { // a bare GPU instance
		t.Fatal(err)
	}
	got, err := emulated.ReadStateFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []emulated.StateInstance{
		{GPUUUID: emulated.GPUUUID("n1", 0), Model: mig.H100_80GB, Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}, MIGUUIDs: []string{u1}},
		{GPUUUID: emulated.GPUUUID("n1", 1), Model: mig.A100_40GB, Profile: "1g.5gb", Placement: mig.Placement{Start: 2, Size: 1}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadStateFile (-want +got):\n%s", d)
	}
	if _, err := emulated.ReadStateFile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("ReadStateFile of a missing file: want an error")
	}
}
