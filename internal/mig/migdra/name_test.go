package migdra

import (
	"testing"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Every (model, profile, legal placement) round-trips through DeviceName, ParseDeviceName and
// Resolve.
func TestDeviceNameRoundTrip(t *testing.T) {
	n := 0
	for _, m := range mig.Models() {
		for _, p := range m.Profiles() {
			for _, pl := range p.Placements() {
				for _, gpu := range []int{0, 7, 12} {
					name := DeviceName(gpu, p, pl)
					ref, err := ParseDeviceName(name)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if ref.GPU != gpu {
						t.Fatalf("%s: GPU %d, want %d", name, ref.GPU, gpu)
					}
					gp, gpl, err := ref.Resolve(m)
					if err != nil {
						t.Fatalf("%s on %s: %v", name, m, err)
					}
					if gp.Name != p.Name || gpl != pl {
						t.Fatalf("%s on %s: resolved %s %v, want %s %v", name, m, gp.Name, gpl, p.Name, pl)
					}
					n++
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no device names checked")
	}
}

func TestParseDeviceNameRefuses(t *testing.T) {
	for _, name := range []string{
		"", "gpu-3", "gpu-x-1g-10gb-at-0", "gpu-1-1g-10gb", "gpu-1-1g-10gb-at-", "gpu-1-1g-10gb-at-x",
		"gpu-01-1g-10gb-at-0", "gpu-1-1g-10gb-at-01", "gpu--1-1g-10gb-at-0", "node-1-1g-10gb-at-0", "gpu-1--at-0",
	} {
		if ref, err := ParseDeviceName(name); err == nil {
			t.Errorf("%q parsed as %+v", name, ref)
		}
	}
}

func TestResolveRefuses(t *testing.T) {
	h100, err := mig.ParseModel("H100-80GB")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []DeviceRef{
		{GPU: 0, ProfileToken: "1g-10gb", Start: 99},
		{GPU: 0, ProfileToken: "9g-1gb", Start: 0},
		{GPU: 0, ProfileToken: "7g-80gb", Start: 1},
	} {
		if p, pl, err := ref.Resolve(h100); err == nil {
			t.Errorf("%+v resolved to %s %v", ref, p.Name, pl)
		}
	}
}

// ProfileName reads every model's device names back without the model.
func TestProfileNameWithoutModel(t *testing.T) {
	for _, m := range mig.Models() {
		for _, p := range m.Profiles() {
			ref, err := ParseDeviceName(DeviceName(3, p, p.Placements()[0]))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := ref.ProfileName(); !ok || got != p.Name {
				t.Errorf("%s %s: ProfileName = %q, %v", m, p.Name, got, ok)
			}
		}
	}
	if got, ok := (DeviceRef{ProfileToken: "9g-1gb"}).ProfileName(); ok {
		t.Errorf("ProfileName of an unknown token = %q", got)
	}
}

// DeviceGPU reads the GPU index of both kinds of device and refuses what neither kind spells.
func TestDeviceGPU(t *testing.T) {
	h100, _ := mig.ParseModel("H100-80GB")
	p, _ := h100.Profile("3g.40gb")
	for name, want := range map[string]int{WholeGPUDeviceName(0): 0, WholeGPUDeviceName(13): 13, DeviceName(5, p, p.Placements()[0]): 5} {
		if got, err := DeviceGPU(name); err != nil || got != want {
			t.Errorf("DeviceGPU(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for _, bad := range []string{"gpu-", "gpu-01", "gpu--1", "gpu-x", "cpu-0", ""} {
		if _, err := DeviceGPU(bad); err == nil {
			t.Errorf("DeviceGPU(%q) accepted", bad)
		}
	}
}
