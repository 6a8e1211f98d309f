package snapshot

import (
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// wholeAlloc is pod's allocation of GPU gpu of node, whole.
func wholeAlloc(name, pod, node, gpu string) *Allocation {
	return &Allocation{Namespace: "ns", Name: name, PodName: pod, PodUID: types.UID(pod + "-uid"), NodeName: node,
		Slot: Slot{Slot: mig.WholeSlot(gpu)}}
}

func wholeMode(g *slicerv1alpha1.GPUStatus) {
	g.Mode, g.MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
}

func dynamic(g *slicerv1alpha1.GPUStatus) { g.ModePolicy = slicerv1alpha1.GPUModePolicyDynamic }

// What the core is told of a GPU (mode, whole use, switchability) follows from NVML's mode, the
// agent's policy and the scheduler's claims: a claim commits the GPU to its mode before the
// agent has switched it, and claims no mode can hold together are a double allocation.
func TestSnapshotModesFromPolicyAndClaims(t *testing.T) {
	type want struct {
		mode       mig.GPUMode
		usable     bool // the core's: serves in its mode
		slices     bool // the snapshot's: takes slices now
		switchable bool
		inUse      bool
		freeSlices int // compute slices free, of a usable GPU in MIG mode
	}
	cases := []struct {
		name          string
		gpu           func(*slicerv1alpha1.GPUStatus)
		allocs        []*Allocation
		want          want
		wantConflicts int
	}{
		{name: "MIG GPU of an agent that does not switch",
			gpu:  func(*slicerv1alpha1.GPUStatus) {},
			want: want{mode: mig.ModeMIG, usable: true, slices: true, freeSlices: 7}},
		{name: "dynamic MIG GPU is switchable",
			gpu:  dynamic,
			want: want{mode: mig.ModeMIG, usable: true, slices: true, switchable: true, freeSlices: 7}},
		{name: "dynamic A100 without reset permission is not switchable",
			gpu:  func(g *slicerv1alpha1.GPUStatus) { dynamic(g); g.Model = "A100-40GB" },
			want: want{mode: mig.ModeMIG, usable: true, slices: true, freeSlices: 7}},
		{name: "dynamic A100 with reset permission is switchable",
			gpu:  func(g *slicerv1alpha1.GPUStatus) { dynamic(g); g.Model, g.ResetAllowed = "A100-40GB", true },
			want: want{mode: mig.ModeMIG, usable: true, slices: true, switchable: true, freeSlices: 7}},
		{name: "whole GPU held whole",
			gpu:    wholeMode,
			allocs: []*Allocation{wholeAlloc("w", "p", "n1", "GPU-n1-a")},
			want:   want{mode: mig.ModeWhole, usable: true, inUse: true}},
		{name: "a whole-GPU claim commits an empty MIG GPU to whole mode",
			gpu:    dynamic,
			allocs: []*Allocation{wholeAlloc("w", "p", "n1", "GPU-n1-a")},
			want:   want{mode: mig.ModeWhole, usable: true, switchable: true, inUse: true}},
		{name: "a slice claim commits a switchable whole GPU to MIG mode",
			gpu:    func(g *slicerv1alpha1.GPUStatus) { wholeMode(g); dynamic(g) },
			allocs: []*Allocation{alloc("s", "p", "n1", "GPU-n1-a", "3g.40gb", 4, 4)},
			want:   want{mode: mig.ModeMIG, usable: true, slices: true, switchable: true, freeSlices: 4}},
		{name: "a slice claim on a switching GPU holds its slot",
			gpu:    func(g *slicerv1alpha1.GPUStatus) { g.Mode = slicerv1alpha1.GPUModeSwitching; dynamic(g) },
			allocs: []*Allocation{alloc("s", "p", "n1", "GPU-n1-a", "1g.10gb", 0, 1)},
			want:   want{mode: mig.ModeMIG, usable: true, slices: true, switchable: true, freeSlices: 6}},
		{name: "a slice on a whole GPU that may not switch is a double allocation",
			gpu:           wholeMode,
			allocs:        []*Allocation{alloc("s", "p", "n1", "GPU-n1-a", "1g.10gb", 0, 1)},
			want:          want{mode: mig.ModeWhole},
			wantConflicts: 1},
		{name: "a whole GPU and a slice on one GPU are a double allocation",
			gpu: dynamic,
			allocs: []*Allocation{wholeAlloc("w", "p", "n1", "GPU-n1-a"),
				alloc("s", "q", "n1", "GPU-n1-a", "1g.10gb", 0, 1)},
			want:          want{mode: mig.ModeMIG, switchable: true, inUse: true},
			wantConflicts: 1},
		{name: "two pods holding one GPU whole are a double allocation",
			gpu:           wholeMode,
			allocs:        []*Allocation{wholeAlloc("w", "p", "n1", "GPU-n1-a"), wholeAlloc("v", "q", "n1", "GPU-n1-a")},
			want:          want{mode: mig.ModeWhole, inUse: true},
			wantConflicts: 1},
		{name: "policy Whole keeps a MIG GPU from new requests",
			gpu:  func(g *slicerv1alpha1.GPUStatus) { g.ModePolicy = slicerv1alpha1.GPUModePolicyWhole },
			want: want{mode: mig.ModeMIG}},
		{name: "policy MIG keeps a whole GPU from new requests",
			gpu:  func(g *slicerv1alpha1.GPUStatus) { wholeMode(g); g.ModePolicy = slicerv1alpha1.GPUModePolicyMIG },
			want: want{mode: mig.ModeWhole}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := &countEvents{}
			c := New(logr.Discard(), ev)
			for _, a := range tc.allocs {
				c.SetAllocation(a)
			}
			c.SetNodeAccelerator(accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) { tc.gpu(&na.Status.GPUs[0]) }))
			c.SetNodeAccelerator(accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) { tc.gpu(&na.Status.GPUs[0]) })) // a rebuild counts no new conflict
			n := c.Node("n1")
			g, mg := n.GPUs[0], n.MIG.GPUs[0]
			got := want{mode: mg.Mode, usable: mg.Usable, slices: g.Usable, switchable: mg.Switchable, inUse: mg.InUse}
			if mg.Usable && mg.Mode == mig.ModeMIG {
				got.freeSlices = mg.State.FreeComputeSlices()
			}
			if got != tc.want {
				t.Errorf("GPU = %+v (reason %q), want %+v", got, g.Reason, tc.want)
			}
			if !g.Usable && g.Reason == "" {
				t.Error("a GPU that takes no slice says no reason")
			}
			if ev.conflicts != tc.wantConflicts {
				t.Errorf("conflicts = %d, want %d", ev.conflicts, tc.wantConflicts)
			}
		})
	}
}

// A node whose GPUs are all whole takes no slice (Reason) but is not blocked (Blocked): it may
// take whole-GPU requests. A node another MIG manager owns is blocked for both.
func TestNodeBlockedIsForEveryRequest(t *testing.T) {
	c := New(logr.Discard(), nil)
	c.SetNodeAccelerator(accel("n1", 2, func(na *slicerv1alpha1.NodeAccelerator) {
		wholeMode(&na.Status.GPUs[0])
		wholeMode(&na.Status.GPUs[1])
	}))
	if n := c.Node("n1"); n.Reason == "" || n.Blocked != "" {
		t.Errorf("all-whole node: Reason %q, Blocked %q; want a reason and no block", n.Reason, n.Blocked)
	}
	c.SetNodeAccelerator(accel("n2", 1, func(na *slicerv1alpha1.NodeAccelerator) {
		na.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionOwnershipConflict, Status: metav1.ConditionTrue, Reason: "ForeignDevicePlugin"}}
	}))
	if n := c.Node("n2"); n.Blocked == "" || n.Reason != n.Blocked {
		t.Errorf("owned node: Reason %q, Blocked %q; want both the ownership conflict", n.Reason, n.Blocked)
	}
}

// One pod's whole GPU seen twice (its reservation, then its allocation before the reservation
// goes) is one holder, not a double allocation.
func TestWholeGPUClaimedTwiceByOnePod(t *testing.T) {
	ev := &countEvents{}
	c := New(logr.Discard(), ev)
	c.SetNodeAccelerator(accel("n1", 1, func(na *slicerv1alpha1.NodeAccelerator) { wholeMode(&na.Status.GPUs[0]) }))
	a := wholeAlloc("w", "p", "n1", "GPU-n1-a")
	if err := c.Reserve(&Reservation{PodUID: a.PodUID, Namespace: "ns", PodName: "p", NodeName: "n1", Slots: []Slot{a.Slot}}); err != nil {
		t.Fatal(err)
	}
	c.SetAllocation(a)
	if g := c.Node("n1").MIG.GPUs[0]; !g.Usable || !g.InUse || ev.conflicts != 0 {
		t.Errorf("GPU %+v, %d conflicts; want usable, in use, no conflict", g, ev.conflicts)
	}
	// Another pod cannot reserve it.
	if err := c.Reserve(&Reservation{PodUID: "q-uid", Namespace: "ns", PodName: "q", NodeName: "n1", Slots: []Slot{{Slot: mig.WholeSlot("GPU-n1-a")}}}); err == nil {
		t.Error("a second pod reserved a GPU held whole")
	}
}
