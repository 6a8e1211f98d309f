package snapshot

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
)

type countEvents struct{ conflicts, reserved, committed int }

func (e *countEvents) ReservationsChanged(r, c int) { e.reserved, e.committed = r, c }
func (e *countEvents) Conflict()                    { e.conflicts++ }

// accel is a NodeAccelerator of node with gpus healthy H100s (UUIDs GPU-<node>-a, -b, ...),
// changed by each mutation.
func accel(node string, gpus int, mut ...func(*slicerv1alpha1.NodeAccelerator)) *slicerv1alpha1.NodeAccelerator {
	b := builder.Accelerator(node)
	for i := range gpus {
		b.GPU("GPU-"+node+"-"+string(rune('a'+i)), "H100-80GB")
	}
	na := b.Obj()
	for _, m := range mut {
		m(na)
	}
	return na
}

func alloc(name, pod, node, gpu, profile string, start, size int) *Allocation {
	return &Allocation{Namespace: "ns", Name: name, PodName: pod, PodUID: types.UID(pod + "-uid"), NodeName: node,
		Slot: Slot{Slot: mig.Slot{GPU: gpu, Profile: profile, Placement: mig.Placement{Start: start, Size: size}}}}
}

// free lists free compute slices per GPU, or -1 for an unusable GPU.
func free(n *Node) []int {
	var out []int
	for i, g := range n.MIG.GPUs {
		if !g.Usable {
			out = append(out, -1)
			continue
		}
		_ = i
		out = append(out, g.State.FreeComputeSlices())
	}
	return out
}

func TestSnapshotUnion(t *testing.T) {
	cases := []struct {
		name          string
		na            *slicerv1alpha1.NodeAccelerator
		allocs        []*Allocation
		reserve       *Reservation
		wantFree      []int
		wantReason    string
		wantConflicts int
	}{
		{name: "empty", na: accel("n1", 2), wantFree: []int{7, 7}},
		{name: "allocation and its realized slice count once",
			na: accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 4}, State: slicerv1alpha1.SliceAllocated}}
			}),
			allocs:   []*Allocation{alloc("a", "p", "n1", "GPU-n1-a", "3g.40gb", 4, 4)},
			wantFree: []int{4}},
		{name: "free slice reported by the agent is taken",
			na: accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 1}, State: slicerv1alpha1.SliceFree}}
			}),
			wantFree: []int{6}},
		{name: "deleting allocation still holds its placement",
			na: accel("n1", 1),
			allocs: []*Allocation{func() *Allocation {
				a := alloc("a", "p", "n1", "GPU-n1-a", "7g.80gb", 0, 8)
				a.Deleting = true
				return a
			}()},
			wantFree: []int{0}},
		{name: "reservation is taken",
			na:       accel("n1", 1),
			reserve:  &Reservation{PodUID: "r", NodeName: "n1", Slots: []Slot{{Slot: mig.Slot{GPU: "GPU-n1-a", Profile: "2g.20gb", Placement: mig.Placement{Start: 2, Size: 2}}}}},
			wantFree: []int{5}},
		{name: "unhealthy and unknown-model GPUs are not usable",
			na: accel("n1", 3, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Health = slicerv1alpha1.GPUUnhealthy
				na.Status.GPUs[1].Model = ""
			}),
			wantFree: []int{-1, -1, 7}},
		{name: "ownership conflict makes the node unusable",
			na: accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionOwnershipConflict, Status: metav1.ConditionTrue, Reason: "ForeignMIGManager"}}
			}),
			wantFree: []int{-1}, wantReason: "MIG is managed by another tool (ForeignMIGManager)"},
		{name: "two pods on overlapping slots: GPU unusable, one conflict",
			na: accel("n1", 2),
			allocs: []*Allocation{alloc("a", "p", "n1", "GPU-n1-a", "4g.40gb", 0, 4),
				alloc("b", "q", "n1", "GPU-n1-a", "1g.10gb", 1, 1)},
			wantFree: []int{-1, 7}, wantConflicts: 1},
		{name: "agent layout conflicting with an allocation (S7): GPU unusable, no conflict counted",
			na: accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "7g.80gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 8}, State: slicerv1alpha1.SliceFree}}
			}),
			allocs:   []*Allocation{alloc("a", "p", "n1", "GPU-n1-a", "1g.10gb", 6, 1)},
			wantFree: []int{-1}, wantReason: "no usable MIG GPU"},
		{name: "whole and switching GPUs serve, take no slice",
			na: accel("n1", 2, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Mode, na.Status.GPUs[0].MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
				na.Status.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			}),
			wantFree: []int{7, 7}, wantReason: "no usable MIG GPU (2 of 2 GPUs in whole mode or switching MIG mode)"},
		{name: "a slice on a whole GPU is a double allocation",
			na: accel("n1", 2, func(na *slicerv1alpha1.NodeAccelerator) {
				na.Status.GPUs[0].Mode, na.Status.GPUs[0].MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
			}),
			allocs:   []*Allocation{alloc("a", "p", "n1", "GPU-n1-a", "1g.10gb", 0, 1)},
			wantFree: []int{-1, 7}, wantConflicts: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := &countEvents{}
			c := New(logr.Discard(), ev)
			for _, a := range tc.allocs {
				c.SetAllocation(a)
			}
			c.SetNodeAccelerator(tc.na)
			if tc.reserve != nil {
				if err := c.Reserve(tc.reserve); err != nil {
					t.Fatal(err)
				}
			}
			n := c.Node("n1")
			if diff := cmp.Diff(tc.wantFree, free(n)); diff != "" {
				t.Errorf("free compute slices (-want +got):\n%s", diff)
			}
			if n.Reason != tc.wantReason {
				t.Errorf("reason %q, want %q", n.Reason, tc.wantReason)
			}
			if ev.conflicts != tc.wantConflicts {
				t.Errorf("conflicts %d, want %d", ev.conflicts, tc.wantConflicts)
			}
		})
	}
}

func TestReserveUnreserve(t *testing.T) {
	ev := &countEvents{}
	c := New(logr.Discard(), ev)
	c.SetNodeAccelerator(accel("n1", 1))
	full := &Reservation{PodUID: "a", NodeName: "n1", Slots: []Slot{{Slot: mig.Slot{GPU: "GPU-n1-a", Profile: "4g.40gb", Placement: mig.Placement{Start: 0, Size: 4}}}}}
	if err := c.Reserve(full); err != nil {
		t.Fatal(err)
	}
	if ev.reserved != 1 {
		t.Errorf("reserved gauge %d, want 1", ev.reserved)
	}
	// A second pod on an overlapping slot is refused: the snapshot it was
	// chosen on is stale.
	clash := &Reservation{PodUID: "b", NodeName: "n1", Slots: []Slot{{Slot: mig.Slot{GPU: "GPU-n1-a", Profile: "1g.10gb", Placement: mig.Placement{Start: 3, Size: 1}}}}}
	if err := c.Reserve(clash); err == nil {
		t.Fatal("overlapping reservation accepted")
	}
	if err := c.Reserve(&Reservation{PodUID: "a", NodeName: "n1"}); err == nil {
		t.Error("second reservation of the same pod accepted")
	}
	c.Commit("a")
	if ev.reserved != 0 || ev.committed != 1 {
		t.Errorf("gauges reserved=%d committed=%d, want 0, 1", ev.reserved, ev.committed)
	}
	if r := c.Unreserve("a"); r == nil || !r.Committed {
		t.Fatalf("Unreserve returned %+v", r)
	}
	if r := c.Unreserve("a"); r != nil {
		t.Errorf("second Unreserve returned %+v, want nil (idempotent)", r)
	}
	if err := c.Reserve(clash); err != nil {
		t.Errorf("slot still taken after Unreserve: %v", err)
	}
	if got := free(c.Node("n1")); got[0] != 6 {
		t.Errorf("free %v, want [6]", got)
	}
	// The pod's own allocation is accepted by its reservation (restart after PreBind).
	own := alloc("x", "p", "n1", "GPU-n1-a", "1g.10gb", 6, 1)
	c.SetAllocation(own)
	if err := c.Reserve(&Reservation{PodUID: own.PodUID, NodeName: "n1", Slots: []Slot{own.Slot}}); err != nil {
		t.Errorf("reservation of the pod's own allocation refused: %v", err)
	}
	if ev.conflicts != 0 {
		t.Errorf("conflicts %d, want 0", ev.conflicts)
	}
}

func TestAllocationLifecycle(t *testing.T) {
	c := New(logr.Discard(), nil)
	c.SetNodeAccelerator(accel("n1", 1))
	ch := c.PodChanged("p-uid")
	c.SetAllocation(alloc("a", "p", "n1", "GPU-n1-a", "7g.80gb", 0, 8))
	select {
	case <-ch:
	default:
		t.Error("PodChanged not closed by a change of the pod's allocation")
	}
	if got := len(c.PodAllocations("p-uid")); got != 1 {
		t.Errorf("PodAllocations = %d, want 1", got)
	}
	if h := c.Holders("n1")["GPU-n1-a"]; !cmp.Equal(h, []string{"ns/p"}) {
		t.Errorf("holders %v", h)
	}
	c.DeleteAllocation("ns", "a")
	if got := free(c.Node("n1")); got[0] != 7 {
		t.Errorf("free after delete %v, want [7]", got)
	}
	c.DeleteNodeAccelerator("n1")
	if c.Node("n1") != nil {
		t.Error("node still in the snapshot after its NodeAccelerator is gone")
	}
}

// Each PreBind waiter wakes on its own pod's allocations only: a change to pod A's does
// not wake pod B's, and B's wakes on its own create, status change and delete.
func TestPodChangedWakesOnlyThatPod(t *testing.T) {
	c := New(logr.Discard(), nil)
	c.SetNodeAccelerator(accel("n1", 2))
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	a := alloc("a", "pa", "n1", "GPU-n1-a", "1g.10gb", 0, 1)
	b := alloc("b", "pb", "n1", "GPU-n1-b", "1g.10gb", 0, 1)
	waitA, waitB := c.PodChanged("pa-uid"), c.PodChanged("pb-uid")
	if c.PodChanged("pb-uid") != waitB {
		t.Error("two waiters of one pod got different channels")
	}

	c.SetAllocation(a)
	if !closed(waitA) {
		t.Error("pod A's waiter not woken by the creation of A's allocation")
	}
	if closed(waitB) {
		t.Error("pod B's waiter woken by the creation of pod A's allocation")
	}
	waitA = c.PodChanged("pa-uid")
	ready := *a
	ready.State = "Ready"
	c.SetAllocation(&ready)
	c.DeleteAllocation("ns", "a")
	if closed(waitB) {
		t.Error("pod B's waiter woken by pod A's status change or delete")
	}
	if !closed(waitA) {
		t.Error("pod A's new waiter not woken by its allocation's status change")
	}

	for _, change := range []func(){
		func() { c.SetAllocation(b) },
		func() { nb := *b; nb.State = "Ready"; c.SetAllocation(&nb) },
		func() { c.DeleteAllocation("ns", "b") },
	} {
		waitB = c.PodChanged("pb-uid")
		change()
		if !closed(waitB) {
			t.Error("pod B's waiter not woken by a change of its own allocation")
		}
	}

	// The pod's reservation going (PostBind, Unreserve) wakes and drops its waiter.
	if err := c.Reserve(&Reservation{PodUID: "pc-uid", NodeName: "n1", Slots: []Slot{a.Slot}}); err != nil {
		t.Fatal(err)
	}
	waitC := c.PodChanged("pc-uid")
	c.Unreserve("pc-uid")
	if !closed(waitC) {
		t.Error("Unreserve left the pod's waiter parked")
	}
	c.mu.RLock()
	left := len(c.waiters)
	c.mu.RUnlock()
	if left != 0 {
		t.Errorf("%d waiter channels left, want 0", left)
	}
}

// A reservation dropped after PreBind created its allocation, but before the
// informer showed it (the pod deleted during PreBind), leaves the slot taken:
// the allocation exists in the API. Without that, another pod reserved the
// slot and the allocation's late add event was a double allocation.
func TestUnreserveKeepsSlotsOfUnseenAllocations(t *testing.T) {
	slot := Slot{Slot: mig.Slot{GPU: "GPU-n1-a", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}}
	created := alloc(slicerv1alpha1.AllocationName("p", "p-uid", 0), "p", "n1", "GPU-n1-a", "7g.80gb", 0, 8)
	other := &Reservation{PodUID: "q-uid", Namespace: "ns", PodName: "q", NodeName: "n1", Slots: []Slot{slot}}
	reserveCreated := func(t *testing.T, c *Cache, commit bool) {
		t.Helper()
		if err := c.Reserve(&Reservation{PodUID: "p-uid", Namespace: "ns", PodName: "p", NodeName: "n1", Slots: []Slot{slot}}); err != nil {
			t.Fatal(err)
		}
		c.Created("p-uid", 0)
		if commit {
			c.Commit("p-uid")
		}
	}

	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("committed=%t", commit), func(t *testing.T) {
			ev := &countEvents{}
			c := New(logr.Discard(), ev)
			c.SetNodeAccelerator(accel("n1", 1))
			reserveCreated(t, c, commit)
			freed := 0
			c.OnFreed(func() { freed++ })
			c.Unreserve("p-uid")
			if got := free(c.Node("n1")); got[0] != 0 {
				t.Errorf("free %v after Unreserve with the allocation not shown yet, want [0]", got)
			}
			if freed != 0 {
				t.Errorf("Unreserve reported room freed %d times, want 0", freed)
			}
			if h := c.Holders("n1")["GPU-n1-a"]; !cmp.Equal(h, []string{"ns/p"}) {
				t.Errorf("holders %v, want the pod of the unseen allocation", h)
			}
			if err := c.Reserve(other); err == nil {
				t.Fatal("another pod reserved the slot of an allocation not shown yet")
			}
			c.SetAllocation(created) // the informer catches up
			if got := free(c.Node("n1")); got[0] != 0 {
				t.Errorf("free %v with the allocation shown, want [0]", got)
			}
			c.DeleteAllocation(created.Namespace, created.Name)
			if freed != 1 {
				t.Errorf("room freed %d times after the allocation went, want 1", freed)
			}
			if err := c.Reserve(other); err != nil {
				t.Errorf("slot still taken after the allocation went: %v", err)
			}
			if ev.conflicts != 0 {
				t.Errorf("conflicts %d, want 0", ev.conflicts)
			}
		})
	}

	t.Run("shown and gone before the reservation is dropped", func(t *testing.T) {
		c := New(logr.Discard(), nil)
		c.SetNodeAccelerator(accel("n1", 1))
		if err := c.Reserve(&Reservation{PodUID: "p-uid", Namespace: "ns", PodName: "p", NodeName: "n1", Slots: []Slot{slot}}); err != nil {
			t.Fatal(err)
		}
		c.SetAllocation(created)
		c.DeleteAllocation(created.Namespace, created.Name)
		c.Created("p-uid", 0) // PreBind's create returned after the informer showed both
		c.Commit("p-uid")
		c.Unreserve("p-uid")
		if got := free(c.Node("n1")); got[0] != 7 {
			t.Errorf("free %v, want [7]: nothing holds the slot", got)
		}
	})

	t.Run("not created", func(t *testing.T) {
		c := New(logr.Discard(), nil)
		c.SetNodeAccelerator(accel("n1", 1))
		if err := c.Reserve(&Reservation{PodUID: "p-uid", Namespace: "ns", PodName: "p", NodeName: "n1", Slots: []Slot{slot}}); err != nil {
			t.Fatal(err)
		}
		c.Unreserve("p-uid") // PreBind's create failed, or PreBind never ran
		if got := free(c.Node("n1")); got[0] != 7 {
			t.Errorf("free %v, want [7]", got)
		}
	})
}

// TestGenerationCountsEveryVisibleChange: each change of what the cache shows moves
// Generation, whether or not it frees room (a new allocation, a reservation taken, a
// NodeAccelerator removed); reads and a change that shows nothing new (Commit, a delete of an
// allocation the cache does not know, a reservation refused) leave it.
func TestGenerationCountsEveryVisibleChange(t *testing.T) {
	c := New(logr.Discard(), nil)
	gpu := "GPU-n1-a"
	last := c.Generation()
	step := func(what string, moves bool, f func()) {
		t.Helper()
		f()
		if got := c.Generation(); (got != last) != moves {
			t.Errorf("%s: generation %d -> %d, want moved=%v", what, last, got, moves)
		}
		last = c.Generation()
	}
	step("a NodeAccelerator added", true, func() { c.SetNodeAccelerator(accel("n1", 1)) })
	step("an allocation added", true, func() { c.SetAllocation(alloc("a", "p", "n1", gpu, "1g.10gb", 0, 1)) })
	step("an allocation being deleted", true, func() {
		a := alloc("a", "p", "n1", gpu, "1g.10gb", 0, 1)
		a.Deleting = true
		c.SetAllocation(a)
	})
	step("reads", false, func() { c.Nodes(); c.Claims("n1"); c.Holders("n1"); c.PodAllocations("p-uid") })
	r := &Reservation{PodUID: "q", Namespace: "ns", PodName: "q", NodeName: "n1",
		Slots: []Slot{{Slot: mig.Slot{GPU: gpu, Profile: "1g.10gb", Placement: mig.Placement{Start: 1, Size: 1}}}}}
	step("a reservation taken", true, func() {
		if err := c.Reserve(r); err != nil {
			t.Fatal(err)
		}
	})
	step("a reservation refused", false, func() {
		if err := c.Reserve(&Reservation{PodUID: "x", NodeName: "n1", Slots: r.Slots}); err == nil {
			t.Fatal("a taken slot reserved twice")
		}
	})
	step("a reservation committed", false, func() { c.Commit("q") })
	step("a reservation dropped", true, func() { c.Unreserve("q") })
	step("an unknown allocation deleted", false, func() { c.DeleteAllocation("ns", "nope") })
	step("an allocation deleted", true, func() { c.DeleteAllocation("ns", "a") })
	step("a NodeAccelerator removed", true, func() { c.DeleteNodeAccelerator("n1") })
}

// A GPU the agent reports unhealthy takes no new slice, and its reason says why (the agent's
// health message: an XID, a reset the driver asks for); once healthy again it is usable.
func TestUnhealthyGPUSaysWhy(t *testing.T) {
	c := New(logr.Discard(), &countEvents{})
	c.SetNodeAccelerator(accel("n1", 2, func(na *slicerv1alpha1.NodeAccelerator) {
		na.Status.GPUs[0].Health = slicerv1alpha1.GPUUnhealthy
		na.Status.GPUs[0].HealthMessage = "GPU 0 is unhealthy: the driver asks for a GPU reset"
	}))
	n := c.Node("n1")
	if diff := cmp.Diff([]int{-1, 7}, free(n)); diff != "" {
		t.Fatalf("free compute slices (-want +got):\n%s", diff)
	}
	if want := "GPU is Unhealthy (GPU 0 is unhealthy: the driver asks for a GPU reset)"; n.GPUs[0].Reason != want {
		t.Fatalf("reason %q, want %q", n.GPUs[0].Reason, want)
	}
	c.SetNodeAccelerator(accel("n1", 2))
	if got := free(c.Node("n1")); got[0] != 7 {
		t.Fatalf("healthy again: %v", got)
	}
}
