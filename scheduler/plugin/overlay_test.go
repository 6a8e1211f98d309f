package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// overlayPod is a pod of the overlay tests: its slots on node n1 (GPU index, profile, start).
type overlayPod struct {
	name      string
	slots     []overlaySlot
	nominated bool // no allocation: a nominated pod whose placement preemption recorded
}

type overlaySlot struct {
	gpu     int
	profile string
	start   int
}

func (o overlayPod) pod() *corev1.Pod {
	var limits []string
	count := map[string]int{}
	for _, s := range o.slots {
		count[s.profile]++
	}
	for prof, n := range count {
		limits = append(limits, mig.ResourceName(prof), fmt.Sprint(n))
	}
	return migPod(o.name, limits...)
}

func (o overlayPod) snapshotSlots(t *testing.T) []snapshot.Slot {
	t.Helper()
	var out []snapshot.Slot
	for i, s := range o.slots {
		p, err := mig.H100_80GB.Profile(s.profile)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, snapshot.Slot{Slot: mig.Slot{GPU: fmt.Sprintf("GPU-n1%d", s.gpu), Profile: p.Name,
			Placement: mig.Placement{Start: s.start, Size: p.MemorySlices}}, Index: int32(i)})
	}
	return out
}

// allocate records the pod's slots as allocations of the plugin's cache.
func (o overlayPod) allocate(t *testing.T, p *Plugin) {
	t.Helper()
	pod := o.pod()
	for _, s := range o.snapshotSlots(t) {
		p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: fmt.Sprintf("%s-%d", o.name, s.Index),
			PodName: o.name, PodUID: pod.UID, NodeName: "n1", Slot: s})
	}
}

func mustPodInfo(t *testing.T, pod *corev1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

var overlayPods = []overlayPod{
	{name: "a", slots: []overlaySlot{{0, "3g.40gb", 0}}},
	{name: "b", slots: []overlaySlot{{0, "1g.10gb", 4}}},
	{name: "c", slots: []overlaySlot{{0, "1g.10gb", 5}, {1, "1g.10gb", 0}}},
	{name: "d", slots: []overlaySlot{{1, "2g.20gb", 2}}},
	{name: "e", slots: []overlaySlot{{1, "1g.10gb", 1}}},
	{name: "n", slots: []overlaySlot{{0, "1g.10gb", 6}}, nominated: true},
	{name: "m", slots: []overlaySlot{{1, "3g.40gb", 4}}, nominated: true},
}

// TestOverlayMatchesFilter: after any sequence of AddPod/RemovePod, the node as Filter sees it
// through the overlay is the node of a snapshot that holds exactly the pods present (the
// nominated ones at the placement preemption recorded), and Filter answers alike for every
// profile.
func TestOverlayMatchesFilter(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(26, 2))
	for run := 0; run < 200; run++ {
		p := testPlugin(t, accel("n1", 2))
		present := map[string]bool{}
		for _, o := range overlayPods {
			if o.nominated {
				p.held.set(o.pod(), "n1", o.snapshotSlots(t), byPreemption, time.Time{})
				continue
			}
			o.allocate(t, p)
			present[o.name] = true
		}
		// The probes rank above the nominated pods, so only the framework's AddPod adds those
		// (heldOverlay holds rooms for pods of equal or higher priority only).
		probe := migPod("probe", "slicer.dev/mig-1g.10gb", "1")
		probe.Spec.Priority = ptr.To[int32](1)
		var cs fwk.CycleState = framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, probe, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		ni := nodeInfo("n1", nil)
		var ops []string
		for step := 0; step < 12; step++ {
			o := overlayPods[r.IntN(len(overlayPods))]
			pi := mustPodInfo(t, o.pod())
			if r.IntN(2) == 0 {
				ops = append(ops, "+"+o.name)
				if st := p.AddPod(ctx, cs, probe, pi, ni); !st.IsSuccess() {
					t.Fatal(st)
				}
				present[o.name] = true
			} else {
				ops = append(ops, "-"+o.name)
				if st := p.RemovePod(ctx, cs, probe, pi, ni); !st.IsSuccess() {
					t.Fatal(st)
				}
				present[o.name] = false
			}
			if r.IntN(3) == 0 {
				cs = cs.Clone() // the framework works on clones
			}
			want := testPlugin(t, accel("n1", 2))
			for _, o := range overlayPods {
				if present[o.name] {
					o.allocate(t, want)
				}
			}
			got, exp := p.nodeView(cs, p.cache.Node("n1"), probe), want.cache.Node("n1").MIG
			for i := range exp.GPUs {
				if got.GPUs[i] != exp.GPUs[i] {
					t.Fatalf("run %d ops %v: GPU %d is %v usable %v, want %v usable %v", run, ops, i,
						got.GPUs[i].State, got.GPUs[i].Usable, exp.GPUs[i].State, exp.GPUs[i].Usable)
				}
			}
			for _, prof := range mig.H100_80GB.Profiles() {
				pod := migPod("probe", prof.ResourceName(), "1")
				pod.Spec.Priority = ptr.To[int32](1)
				var pcs, wcs fwk.CycleState = cs.Clone(), framework.NewCycleState()
				if _, st := p.PreFilter(ctx, pcs, pod, nil); !st.IsSuccess() {
					t.Fatal(st)
				}
				if _, st := want.PreFilter(ctx, wcs, pod, nil); !st.IsSuccess() {
					t.Fatal(st)
				}
				gotSt, wantSt := p.Filter(ctx, pcs, pod, ni), want.Filter(ctx, wcs, pod, ni)
				if gotSt.Code() != wantSt.Code() {
					t.Fatalf("run %d ops %v: Filter(%s) = %v, want %v", run, ops, prof.Name, gotSt, wantSt)
				}
			}
		}
	}
}

// TestOverlayNominatedOverVictims: a nominated pod whose cleared placement its victims still
// hold makes that GPU unusable to the pods filtered with it, and only that GPU; a nominated
// pod with no recorded placement that fits nowhere blocks the node.
func TestOverlayNominatedOverVictims(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, accel("n1", 2))
	for _, o := range overlayPods[:5] {
		o.allocate(t, p)
	}
	// Cleared for "x": 3g.40gb at 4 on GPU 0, where b and c still are.
	x := overlayPod{name: "x", slots: []overlaySlot{{0, "3g.40gb", 4}}}
	p.held.set(x.pod(), "n1", x.snapshotSlots(t), byPreemption, time.Time{})
	low := migPod("low", "slicer.dev/mig-1g.10gb", "1")
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, low, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	ni := nodeInfo("n1", nil)
	if st := p.AddPod(ctx, cs, low, mustPodInfo(t, x.pod()), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	view := p.nodeView(cs, p.cache.Node("n1"), low)
	if view.GPUs[0].Usable || !view.GPUs[1].Usable {
		t.Fatalf("usable = %v, %v; want GPU 0 held for the nominated pod, GPU 1 free to use", view.GPUs[0].Usable, view.GPUs[1].Usable)
	}
	// Without a record, a nominated 7g.80gb fits nowhere: the node is blocked.
	p2 := testPlugin(t, accel("n1", 2))
	for _, o := range overlayPods[:5] {
		o.allocate(t, p2)
	}
	big := migPod("big", "slicer.dev/mig-7g.80gb", "1")
	cs2 := framework.NewCycleState()
	if _, st := p2.PreFilter(ctx, cs2, low, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p2.AddPod(ctx, cs2, low, mustPodInfo(t, big), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p2.Filter(ctx, cs2, low, ni); st.IsSuccess() {
		t.Fatal("Filter passes a 1g.10gb pod on a node blocked by a nominated 7g.80gb")
	}
	if st := p2.RemovePod(ctx, cs2, low, mustPodInfo(t, big), ni); !st.IsSuccess() {
		t.Fatal(st)
	}
	if st := p2.Filter(ctx, cs2, low, ni); !st.IsSuccess() {
		t.Fatalf("Filter after the nominated pod is removed again: %v", st)
	}
}
