// Package nvmltest is the conformance suite every nvml.Library backend must
// pass: placements as internal/mig's tables say, exact-placement creation,
// NVML's error codes for overlap and in-use destroys. It mutates MIG state on
// the device it is given, so on real hardware run it only on an idle GPU. RunMode (mode.go)
// checks the MIG mode rules; it switches MIG mode, so it is for the emulator and the mock.
package nvmltest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Run checks lib's device index, which must be an empty, MIG-enabled GPU of model m.
func Run(t *testing.T, lib nvml.Library, index int, m mig.Model) {
	t.Helper()
	dev, err := lib.Device(index)
	if err != nil {
		t.Fatalf("Device(%d): %v", index, err)
	}
	if cur, _, err := dev.MIGMode(); err != nil || cur != nvml.MIGEnabled {
		t.Fatalf("MIGMode = %v, %v; want enabled", cur, err)
	}
	uuid, err := dev.UUID()
	if err != nil || len(uuid) < 5 || uuid[:4] != "GPU-" {
		t.Errorf("UUID = %q, %v; want GPU-...", uuid, err)
	}
	giProfiles, ciProfiles := Profiles(m)
	if got, err := nvml.ListInstances(dev, giProfiles, ciProfiles); err != nil || len(got) != 0 {
		t.Fatalf("ListInstances on the GPU under test = %d instances, %v; want an empty GPU", len(got), err)
	}

	t.Run("placements", func(t *testing.T) {
		for _, p := range m.Profiles() {
			info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
			if err != nil {
				t.Errorf("%s: profile info: %v", p.Name, err)
				continue
			}
			if info.SliceCount != p.ComputeSlices || info.InstanceCount != p.MaxCount {
				t.Errorf("%s: profile info slices %d count %d, table says %d and %d", p.Name, info.SliceCount, info.InstanceCount, p.ComputeSlices, p.MaxCount)
			}
			got, err := dev.GPUInstancePossiblePlacements(info)
			if err != nil {
				t.Errorf("%s: placements: %v", p.Name, err)
				continue
			}
			var want []nvml.Placement
			for _, pl := range p.Placements() {
				want = append(want, nvml.Placement{Start: pl.Start, Size: pl.Size})
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s: possible placements differ from internal/mig (-table +nvml):\n%s", p.Name, d)
			}
		}
	})

	t.Run("create at every placement, then destroy", func(t *testing.T) {
		for _, p := range m.Profiles() {
			info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			for _, pl := range p.Placements() {
				gi, ci, uuid := create(t, dev, info, p, nvml.Placement{Start: pl.Start, Size: pl.Size})
				if gi == nil {
					continue
				}
				gii, err := gi.Info()
				if err != nil || gii.Placement != (nvml.Placement{Start: pl.Start, Size: pl.Size}) {
					t.Errorf("%s@%d: GPU instance info %+v, %v", p.Name, pl.Start, gii, err)
				}
				if uuid == "" {
					t.Errorf("%s@%d: no MIG device listed for the new compute instance", p.Name, pl.Start)
				}
				destroy(t, gi, ci)
			}
		}
	})

	t.Run("overlap is insufficient resources", func(t *testing.T) {
		big := largest(m)
		info, err := dev.GPUInstanceProfileInfo(big.NVMLProfile)
		if err != nil {
			t.Fatal(err)
		}
		gi, ci, _ := create(t, dev, info, big, nvml.Placement{Start: 0, Size: big.MemorySlices})
		if gi == nil {
			return
		}
		defer destroy(t, gi, ci)
		small := m.Profiles()[0]
		sinfo, err := dev.GPUInstanceProfileInfo(small.NVMLProfile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dev.CreateGPUInstanceWithPlacement(sinfo, nvml.Placement{Start: 0, Size: small.MemorySlices}); !nvml.IsInsufficientResources(err) {
			t.Errorf("overlapping create: err = %v, want ERROR_INSUFFICIENT_RESOURCES", err)
		}
	})

	t.Run("destroy GPU instance with a compute instance is in use", func(t *testing.T) {
		p := m.Profiles()[0]
		info, err := dev.GPUInstanceProfileInfo(p.NVMLProfile)
		if err != nil {
			t.Fatal(err)
		}
		gi, ci, _ := create(t, dev, info, p, nvml.Placement{Start: p.Starts[0], Size: p.MemorySlices})
		if gi == nil {
			return
		}
		if err := gi.Destroy(); !nvml.IsInUse(err) {
			t.Errorf("destroy GI with CI: err = %v, want ERROR_IN_USE", err)
		}
		destroy(t, gi, ci)
		if err := ci.Destroy(); err == nil {
			t.Errorf("destroying a destroyed compute instance succeeded")
		}
	})
}

// Profiles returns the GPU_INSTANCE_PROFILE_* and COMPUTE_INSTANCE_PROFILE_*
// values to enumerate on model m.
func Profiles(m mig.Model) (gi, ci []int) {
	seenCI := map[int]bool{}
	for _, p := range m.Profiles() {
		gi = append(gi, p.NVMLProfile)
		if !seenCI[p.ComputeInstanceProfile] {
			seenCI[p.ComputeInstanceProfile] = true
			ci = append(ci, p.ComputeInstanceProfile)
		}
	}
	return gi, ci
}

func largest(m mig.Model) mig.Profile {
	ps := m.Profiles()
	best := ps[0]
	for _, p := range ps {
		if p.MemorySlices > best.MemorySlices {
			best = p
		}
	}
	return best
}

func create(t *testing.T, dev nvml.Device, info nvml.GPUInstanceProfileInfo, p mig.Profile, pl nvml.Placement) (nvml.GPUInstance, nvml.ComputeInstance, string) {
	t.Helper()
	gi, err := dev.CreateGPUInstanceWithPlacement(info, pl)
	if err != nil {
		t.Errorf("%s@%d: create GPU instance: %v", p.Name, pl.Start, err)
		return nil, nil, ""
	}
	cinfo, err := gi.ComputeInstanceProfileInfo(p.ComputeInstanceProfile)
	if err != nil {
		t.Errorf("%s@%d: compute instance profile: %v", p.Name, pl.Start, err)
		return gi, nil, ""
	}
	ci, err := gi.CreateComputeInstance(cinfo)
	if err != nil {
		t.Errorf("%s@%d: create compute instance: %v", p.Name, pl.Start, err)
		return gi, nil, ""
	}
	cii, err := ci.Info()
	if err != nil {
		t.Errorf("%s@%d: compute instance info: %v", p.Name, pl.Start, err)
	}
	gii, err := gi.Info()
	if err != nil {
		t.Errorf("%s@%d: GPU instance info: %v", p.Name, pl.Start, err)
	}
	devs, err := dev.MIGDevices()
	if err != nil {
		t.Errorf("%s@%d: MIG devices: %v", p.Name, pl.Start, err)
	}
	for _, d := range devs {
		if d.GPUInstanceID == gii.ID && d.ComputeInstanceID == cii.ID {
			return gi, ci, d.UUID
		}
	}
	return gi, ci, ""
}

func destroy(t *testing.T, gi nvml.GPUInstance, ci nvml.ComputeInstance) {
	t.Helper()
	if ci != nil {
		if err := ci.Destroy(); err != nil {
			t.Errorf("destroy compute instance: %v", err)
		}
	}
	if err := gi.Destroy(); err != nil {
		t.Errorf("destroy GPU instance: %v", err)
	}
}

// RunStates walks every legal occupancy of m's table on lib's device index (an empty,
// MIG-enabled GPU of model m), creating and destroying GPU instances along the way, and checks
// that in each state NVML accepts exactly the placements the table calls legal and refuses the
// others with ERROR_INSUFFICIENT_RESOURCES. It makes tens of thousands of calls: it is meant
// for NVIDIA's mock with the driver's rules (nvidiamock), not for real hardware. It returns
// the number of states visited.
func RunStates(t *testing.T, lib nvml.Library, index int, m mig.Model) int {
	t.Helper()
	dev, err := lib.Device(index)
	if err != nil {
		t.Fatalf("Device(%d): %v", index, err)
	}
	infos := map[int]nvml.GPUInstanceProfileInfo{}
	for _, p := range m.Profiles() {
		if infos[p.NVMLProfile], err = dev.GPUInstanceProfileInfo(p.NVMLProfile); err != nil {
			t.Fatalf("%s: profile info: %v", p.Name, err)
		}
	}
	const maxErrors = 20
	errs := 0
	report := func(format string, args ...any) {
		errs++
		if errs <= maxErrors {
			t.Errorf(format, args...)
		}
	}
	visited := map[mig.GPUState]bool{}
	var walk func(s mig.GPUState)
	walk = func(s mig.GPUState) {
		visited[s] = true
		for _, p := range m.Profiles() {
			for _, pl := range p.Placements() {
				if errs > maxErrors {
					return
				}
				next, terr := s.Take(p, pl)
				gi, cerr := dev.CreateGPUInstanceWithPlacement(infos[p.NVMLProfile], nvml.Placement{Start: pl.Start, Size: pl.Size})
				switch {
				case terr != nil && cerr == nil:
					report("on [%s] NVML created %s at %v, which the table refuses (%v)", s, p.Name, pl, terr)
				case terr == nil && cerr != nil:
					report("on [%s] NVML refused %s at %v (%v), which the table allows", s, p.Name, pl, cerr)
				case terr != nil && !nvml.IsInsufficientResources(cerr):
					report("on [%s] %s at %v: %v, want ERROR_INSUFFICIENT_RESOURCES", s, p.Name, pl, cerr)
				}
				if cerr != nil {
					continue
				}
				if terr == nil && !visited[next] {
					walk(next)
				}
				if err := gi.Destroy(); err != nil {
					t.Fatalf("on [%s] destroying %s at %v: %v", s, p.Name, pl, err)
				}
			}
		}
	}
	walk(mig.EmptyGPU(m))
	if errs > maxErrors {
		t.Errorf("... %d more differences", errs-maxErrors)
	}
	return len(visited)
}
