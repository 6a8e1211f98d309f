package migapi

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

func TestAppendReported(t *testing.T) {
	g := &slicerv1alpha1.GPUStatus{Model: "H100-80GB", Slices: []slicerv1alpha1.MIGSlice{
		{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 4}, State: slicerv1alpha1.SliceAllocated,
			Allocation: &slicerv1alpha1.AllocationReference{Namespace: "ns", Name: "a"}},
		{Profile: "1g.10gb.me", Placement: slicerv1alpha1.Placement{Start: 0, Size: 1}, State: slicerv1alpha1.SliceOrphaned},
	}}
	before := []mig.Occupant{{Instance: mig.Instance{Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}}, Holder: "pod-a"}}
	got := AppendReported(before, g)
	want := []mig.Occupant{
		before[0],
		{Instance: mig.Instance{Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}},
		{Instance: mig.Instance{Profile: "1g.10gb.me", Placement: mig.Placement{Start: 0, Size: 1}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("occupants (-want +got):\n%s", diff)
	}
	st, err := mig.Occupancy(mig.H100_80GB, got, mig.FailOnMisfit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]mig.Instance{{Profile: "1g.10gb+me", Placement: mig.Placement{Start: 0, Size: 1}},
		{Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}},
		{Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}}, st.Instances()); diff != "" {
		t.Errorf("occupancy (-want +got):\n%s", diff)
	}
}
