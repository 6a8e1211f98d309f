package snapshot

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// TestFreedGeneration: each step either may free room (the generation moves
// and OnFreed runs, after the snapshot shows the change) or does not.
func TestFreedGeneration(t *testing.T) {
	c := New(logr.Discard(), nil)
	calls := 0
	var seenFree []int
	c.OnFreed(func() {
		calls++
		// The callback runs without the lock, on the new snapshot.
		if n := c.Node("n1"); n != nil {
			seenFree = free(n)
		}
	})
	gpu := "GPU-n1-a"
	sliceOf := func(start, size int32) func(*slicerv1alpha1.NodeAccelerator) {
		return func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs[0].Slices = append(na.Status.GPUs[0].Slices,
				slicerv1alpha1.MIGSlice{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: start, Size: size}})
		}
	}
	held := alloc("a", "p", "n1", gpu, "3g.40gb", 0, 4)
	steps := []struct {
		name  string
		do    func()
		freed bool
	}{
		{"accelerator added", func() { c.SetNodeAccelerator(accel("n1", 1)) }, true},
		{"accelerator rewritten unchanged", func() { c.SetNodeAccelerator(accel("n1", 1)) }, false},
		{"slice reported", func() { c.SetNodeAccelerator(accel("n1", 1, sliceOf(6, 1))) }, false},
		{"slice released", func() { c.SetNodeAccelerator(accel("n1", 1)) }, true},
		{"allocation added", func() { c.SetAllocation(held) }, false},
		{"allocation status changed", func() {
			cp := *held
			cp.State = slicerv1alpha1.AllocationReady
			c.SetAllocation(&cp)
		}, false},
		{"allocation moved", func() { c.SetAllocation(alloc("a", "p", "n1", gpu, "3g.40gb", 4, 4)) }, true},
		{"unknown allocation deleted", func() { c.DeleteAllocation("ns", "nope") }, false},
		{"reservation held", func() {
			if err := c.Reserve(&Reservation{PodUID: "q-uid", Namespace: "ns", PodName: "q", NodeName: "n1",
				Slots: []Slot{{Slot: mig.Slot{GPU: gpu, Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}}}}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"reservation dropped", func() { c.Unreserve("q-uid") }, true},
		{"reservation dropped twice", func() { c.Unreserve("q-uid") }, false},
		{"allocation deleted", func() { c.DeleteAllocation("ns", "a") }, true},
		{"accelerator gone", func() { c.DeleteNodeAccelerator("n1") }, false},
	}
	for _, s := range steps {
		gen, before := c.FreedGeneration(), calls
		s.do()
		if moved := c.FreedGeneration() != gen; moved != s.freed {
			t.Errorf("%s: generation moved %v, want %v", s.name, moved, s.freed)
		}
		if called := calls != before; called != s.freed {
			t.Errorf("%s: OnFreed called %v, want %v", s.name, called, s.freed)
		}
	}
	// The last wake-up (allocation deleted) saw the whole GPU free.
	if diff := cmp.Diff([]int{7}, seenFree); diff != "" {
		t.Errorf("snapshot seen by OnFreed (-want +got):\n%s", diff)
	}
}
