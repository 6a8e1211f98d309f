package snapshot

import (
	"testing"

	"github.com/go-logr/logr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// ClaimAt answers for one slot what Claims answers for the whole node. The node here has every
// kind of claim, and some overlap: two allocations of one slot (the first by name wins; their
// GPU is then unusable), a reservation, a created allocation not shown yet, slices only the
// agent reports (one of them also allocated), a deleting allocation; and a second node whose
// claims must not be seen from the first.
func TestClaimAtAgreesWithClaims(t *testing.T) {
	at := func(gpu, profile string, start, size int) Slot {
		return Slot{Slot: mig.Slot{GPU: gpu, Profile: profile, Placement: mig.Placement{Start: start, Size: size}}}
	}
	c := New(logr.Discard(), &countEvents{})
	reported := func(gpu int, profile string, start, size int32) func(*slicerv1alpha1.NodeAccelerator) {
		return func(na *slicerv1alpha1.NodeAccelerator) {
			g := &na.Status.GPUs[gpu]
			g.Slices = append(g.Slices, slicerv1alpha1.MIGSlice{Profile: slicerv1alpha1.MIGProfile(profile),
				Placement: slicerv1alpha1.Placement{Start: start, Size: size}})
		}
	}
	c.SetNodeAccelerator(accel("n1", 3, reported(0, "1g.10gb", 6, 1), reported(1, "1g.10gb", 6, 1), reported(1, "2g.20gb", 2, 2)))
	c.SetNodeAccelerator(accel("n2", 1, reported(0, "1g.10gb", 0, 1)))
	c.SetAllocation(alloc("a", "p1", "n1", "GPU-n1-a", "3g.40gb", 0, 4))
	c.SetAllocation(alloc("b", "p2", "n1", "GPU-n1-b", "1g.10gb", 6, 1))
	c.SetAllocation(alloc("z", "p3", "n1", "GPU-n1-b", "1g.10gb", 0, 1))
	c.SetAllocation(alloc("y", "p4", "n1", "GPU-n1-b", "1g.10gb", 0, 1))
	leaving := alloc("d", "p5", "n1", "GPU-n1-a", "1g.10gb", 5, 1)
	leaving.Deleting = true
	c.SetAllocation(leaving)
	c.SetAllocation(alloc("e", "p6", "n2", "GPU-n2-a", "3g.40gb", 4, 4))
	if err := c.Reserve(&Reservation{PodUID: "r1", Namespace: "ns", PodName: "r1", NodeName: "n1",
		Slots: []Slot{at("GPU-n1-a", "1g.10gb", 4, 1)}}); err != nil {
		t.Fatal(err)
	}
	// A reservation whose allocation PreBind created and the informer has not shown.
	if err := c.Reserve(&Reservation{PodUID: "r2", Namespace: "ns", PodName: "r2", NodeName: "n1",
		Slots: []Slot{at("GPU-n1-c", "1g.10gb", 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	c.Created("r2", 0)
	c.Commit("r2")

	claims := c.Claims("n1")
	seen := 0
	for _, gpu := range []string{"GPU-n1-a", "GPU-n1-b", "GPU-n1-c", "GPU-n2-a", "GPU-none"} {
		byStart := map[mig.Slot]Claim{}
		for _, cl := range claims[gpu] {
			byStart[cl.Slot.Slot] = cl
		}
		for _, p := range mig.H100_80GB.Profiles() {
			for _, pl := range p.Placements() {
				slot := mig.Slot{GPU: gpu, Profile: p.Name, Placement: pl}
				got, ok := c.ClaimAt("n1", slot)
				want, wantOK := byStart[slot]
				if ok != wantOK || got != want {
					t.Errorf("ClaimAt(n1, %v) = %+v, %t; Claims has %+v, %t", slot, got, ok, want, wantOK)
				}
				if ok {
					seen++
				}
			}
		}
	}
	if want := len(claims["GPU-n1-a"]) + len(claims["GPU-n1-b"]) + len(claims["GPU-n1-c"]); seen != want || seen < 8 {
		t.Errorf("ClaimAt found %d claims, Claims has %d (want at least 8: every kind)", seen, want)
	}
	// Who wins a slot, by kind (both functions read one walk, so agreeing is not enough).
	for _, tc := range []struct {
		what string
		slot Slot
		want Claim
	}{
		{"two allocations of one slot: the first by name (y)", at("GPU-n1-b", "1g.10gb", 0, 1),
			Claim{Slot: at("GPU-n1-b", "1g.10gb", 0, 1), PodUID: "p4-uid", Pod: "ns/p4", Allocated: true}},
		{"an allocation before the agent's report of its slice", at("GPU-n1-b", "1g.10gb", 6, 1),
			Claim{Slot: at("GPU-n1-b", "1g.10gb", 6, 1), PodUID: "p2-uid", Pod: "ns/p2", Allocated: true}},
		{"a deleting allocation", at("GPU-n1-a", "1g.10gb", 5, 1),
			Claim{Slot: at("GPU-n1-a", "1g.10gb", 5, 1), PodUID: "p5-uid", Pod: "ns/p5", Allocated: true, Leaving: true}},
		{"a reservation", at("GPU-n1-a", "1g.10gb", 4, 1),
			Claim{Slot: at("GPU-n1-a", "1g.10gb", 4, 1), PodUID: "r1", Pod: "ns/r1"}},
		{"a created allocation not shown yet", at("GPU-n1-c", "1g.10gb", 1, 1),
			Claim{Slot: at("GPU-n1-c", "1g.10gb", 1, 1), PodUID: "r2", Pod: "ns/r2"}},
		{"a slice only the agent reports", at("GPU-n1-a", "1g.10gb", 6, 1),
			Claim{Slot: at("GPU-n1-a", "1g.10gb", 6, 1)}},
	} {
		if got, ok := c.ClaimAt("n1", tc.slot.Slot); !ok || got != tc.want {
			t.Errorf("%s: ClaimAt = %+v, %t; want %+v", tc.what, got, ok, tc.want)
		}
	}
}
