package migapi

import (
	"testing"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

func TestRoundTrip(t *testing.T) {
	for _, api := range []slicerv1alpha1.MIGProfile{"1g.10gb", "1g.10gb.me", "7g.80gb", "1g.5gb.me"} {
		name, err := Profile(api)
		if err != nil {
			t.Fatal(err)
		}
		if back := APIProfile(name); back != api {
			t.Errorf("%s → %s → %s", api, name, back)
		}
	}
	if name, _ := Profile("1g.10gb.me"); name != "1g.10gb+me" {
		t.Errorf("internal name of 1g.10gb.me is %q, want NVIDIA spelling", name)
	}
	if _, err := Profile("5g.1tb"); err == nil {
		t.Error("unknown profile accepted")
	}
	spec := &slicerv1alpha1.SliceAllocationSpec{GPUUUID: "GPU-1", Profile: "3g.40gb", Placement: &slicerv1alpha1.Placement{Start: 4, Size: 4}}
	slot, err := SlotOf(spec)
	want := mig.Slot{GPU: "GPU-1", Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}
	if err != nil || slot != want {
		t.Errorf("SlotOf = %+v, %v; want %+v", slot, err, want)
	}
	if APIPlacement(slot.Placement) != *spec.Placement {
		t.Errorf("APIPlacement(%v) = %v", slot.Placement, APIPlacement(slot.Placement))
	}
}

// A whole GPU and a slice each survive SpecSlot then SlotOf, and a slice without a placement
// is an error, not a slice at start 0.
func TestSpecSlotRoundTrip(t *testing.T) {
	for _, slot := range []mig.Slot{
		mig.WholeSlot("GPU-1"),
		{GPU: "GPU-2", Profile: "1g.10gb+me", Placement: mig.Placement{Start: 6, Size: 1}},
	} {
		spec := &slicerv1alpha1.SliceAllocationSpec{}
		SpecSlot(spec, slot)
		if spec.WholeGPU != slot.Whole() || (spec.Placement == nil) != slot.Whole() {
			t.Errorf("SpecSlot(%v) = %+v", slot, spec)
		}
		if got, err := SlotOf(spec); err != nil || got != slot {
			t.Errorf("SlotOf(SpecSlot(%v)) = %v, %v", slot, got, err)
		}
	}
	bad := &slicerv1alpha1.SliceAllocationSpec{GPUUUID: "GPU-1", Profile: "3g.40gb"}
	if slot, err := SlotOf(bad); err == nil {
		t.Errorf("SlotOf of a slice without placement = %v, want an error", slot)
	}
	if got := SlotAsWritten(bad); got != (mig.Slot{GPU: "GPU-1", Profile: "3g.40gb"}) {
		t.Errorf("SlotAsWritten = %v", got)
	}
}
