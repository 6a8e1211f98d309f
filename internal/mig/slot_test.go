package mig_test

import (
	"testing"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/slicer-operator/slicer/internal/mig"
)

// Every legal slot of every model has its own device ID, a valid CDI device name, and the
// same ID whichever spelling of the profile names it.
func TestSlotDeviceID(t *testing.T) {
	const gpu = "GPU-0f6a2c4e-1b3d-4e5f-8a9b-0c1d2e3f4a5b"
	for _, m := range mig.Models() {
		seen := map[string]mig.Slot{}
		for _, p := range m.Profiles() {
			for _, pl := range p.Placements() {
				s := mig.Slot{GPU: gpu, Profile: p.Name, Placement: pl}
				id := s.DeviceID()
				if err := parser.ValidateDeviceName(id); err != nil {
					t.Errorf("%s %s: %q is no CDI device name: %v", m, s, id, err)
				}
				if o, dup := seen[id]; dup {
					t.Errorf("%s: %s and %s share device ID %q", m, o, s, id)
				}
				seen[id] = s
				if legal := (mig.Slot{GPU: gpu, Profile: p.LegalName(), Placement: pl}).DeviceID(); legal != id {
					t.Errorf("%s %s: %q in Kubernetes spelling, %q in NVIDIA's", m, s, legal, id)
				}
			}
		}
	}
	a := mig.Slot{GPU: gpu, Profile: "1g.10gb", Placement: mig.Placement{Start: 3, Size: 1}}
	if got, want := a.DeviceID(), gpu+"_1g.10gb_3"; got != want {
		t.Errorf("DeviceID = %q, want %q", got, want)
	}
}

// A whole GPU overlaps every slot of its GPU and none of another's; the kubelet knows it by its
// UUID, as NVIDIA's device plugin names whole GPUs.
func TestWholeSlot(t *testing.T) {
	whole := mig.WholeSlot("GPU-a")
	slice := mig.Slot{GPU: "GPU-a", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}
	other := mig.Slot{GPU: "GPU-b", Profile: "1g.10gb", Placement: mig.Placement{Start: 6, Size: 1}}
	if !whole.Whole() || slice.Whole() {
		t.Fatalf("Whole: %v, %v", whole.Whole(), slice.Whole())
	}
	if !whole.Overlaps(slice) || !slice.Overlaps(whole) || !whole.Overlaps(whole) || whole.Overlaps(other) {
		t.Errorf("Overlaps wrong for %v, %v, %v", whole, slice, other)
	}
	if whole.DeviceID() != "GPU-a" || whole.String() != "GPU-a whole" {
		t.Errorf("DeviceID %q, String %q", whole.DeviceID(), whole.String())
	}
}
