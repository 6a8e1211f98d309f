package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// modes sets each GPU of na: 'w' whole, 'm' MIG, 'd' MIG with policy Dynamic (switchable),
// 'D' whole with policy Dynamic.
func modes(na *slicerv1alpha1.NodeAccelerator, spec string) *slicerv1alpha1.NodeAccelerator {
	for i, c := range spec {
		g := &na.Status.GPUs[i]
		if c == 'w' || c == 'D' {
			g.Mode, g.MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
		}
		if c == 'd' || c == 'D' {
			g.ModePolicy = slicerv1alpha1.GPUModePolicyDynamic
		}
	}
	return na
}

// foreignNodeInfo is a node Slicer does not manage, with gpus nvidia.com/gpu allocatable and
// pods requesting used of them.
func foreignNodeInfo(name string, gpus, used int) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	node.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(gpus), resource.DecimalSI)}
	ni.SetNode(node)
	if used > 0 {
		ni.AddPod(builder.Pod("ns", "user-"+name).UID("uid-user-"+name).Node(name).
			Container("c", builder.Both("nvidia.com/gpu", resource.NewQuantity(int64(used), resource.DecimalSI).String())).Obj())
	}
	return ni
}

// A whole-GPU pod is placed by the core on Slicer nodes (GPUs already whole first, a switch only
// of a switchable empty MIG GPU) and counted on other nodes; Reserve holds one whole slot per
// GPU, none on a node Slicer does not manage.
func TestWholeGPUFilterScoreReserve(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t,
		modes(accel("whole", 2), "ww"),   // two whole GPUs
		modes(accel("mig", 2), "mm"),     // MIG, fixed: never whole
		modes(accel("dyn", 2), "dd"),     // MIG, switchable
		modes(accel("mixed", 2), "wd"),   // one whole, one switchable MIG
		modes(accel("allwhole", 1), "D"), // whole, switchable: takes slices after a switch
	)
	two := migPod("two", "nvidia.com/gpu", "2")
	cs, s := preFilter(t, p, two)
	if s.whole != 2 || len(s.missing) != 2 || s.req != nil {
		t.Fatalf("state %+v", s)
	}
	fits := map[string]bool{}
	scores := map[string]int64{}
	for _, ni := range []fwk.NodeInfo{nodeInfo("whole", nil), nodeInfo("mig", nil), nodeInfo("dyn", nil),
		nodeInfo("mixed", nil), nodeInfo("allwhole", nil), foreignNodeInfo("nv-free", 4, 1), foreignNodeInfo("nv-full", 4, 3)} {
		st := p.Filter(ctx, cs, two, ni)
		fits[ni.Node().Name] = st.IsSuccess()
		if st.IsSuccess() {
			scores[ni.Node().Name], _ = p.Score(ctx, cs, two, ni)
		}
	}
	want := map[string]bool{"whole": true, "mig": false, "dyn": true, "mixed": true, "allwhole": false, "nv-free": true, "nv-full": false}
	for n, w := range want {
		if fits[n] != w {
			t.Errorf("node %s fits %v, want %v", n, fits[n], w)
		}
	}
	if scores["whole"] <= scores["mixed"] || scores["mixed"] <= scores["dyn"] {
		t.Errorf("scores %v: want whole > mixed (one switch) > dyn (two switches)", scores)
	}
	if st := p.Reserve(ctx, cs, two, "mixed"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	r := p.cache.Reservation(two.UID)
	wantSlots := []snapshot.Slot{{Slot: mig.WholeSlot("GPU-mixed0"), Index: 0}, {Slot: mig.WholeSlot("GPU-mixed1"), Index: 1}}
	if r == nil || len(r.Slots) != 2 || r.Slots[0] != wantSlots[0] || r.Slots[1] != wantSlots[1] {
		t.Fatalf("reservation %+v, want slots %v", r, wantSlots)
	}
	// The reservation holds both GPUs: the switched one is whole from now on, and a second pod
	// finds no room there.
	n := p.cache.Node("mixed")
	for i, g := range n.MIG.GPUs {
		if g.Mode != mig.ModeWhole || !g.InUse {
			t.Errorf("GPU %d after Reserve: %+v", i, g)
		}
	}
	one := migPod("one", "nvidia.com/gpu", "1")
	cs1, _ := preFilter(t, p, one)
	if st := p.Filter(ctx, cs1, one, nodeInfo("mixed", nil)); st.IsSuccess() {
		t.Error("a GPU held whole is taken again")
	}
	// A node Slicer does not manage: nothing to hold.
	if st := p.Reserve(ctx, cs1, one, "nv-free"); !st.IsSuccess() {
		t.Fatalf("Reserve on a foreign node: %v", st)
	}
	if r := p.cache.Reservation(one.UID); r == nil || len(r.Slots) != 0 {
		t.Errorf("reservation on a foreign node %+v, want no slot", r)
	}
}

// A slice goes to a MIG GPU first, and to a switchable whole GPU only where no MIG GPU has room;
// a node of whole switchable GPUs is not refused for slices.
func TestSliceSwitchesAWholeGPUOnlyWhenNeeded(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, modes(accel("allwhole", 2), "DD"), modes(accel("fixed", 1), "w"))
	pod := migPod("s", "slicer.dev/mig-3g.40gb", "1")
	cs, _ := preFilter(t, p, pod)
	if st := p.Filter(ctx, cs, pod, nodeInfo("fixed", nil)); st.IsSuccess() {
		t.Error("a slice fits a whole GPU that may not switch")
	}
	if st := p.Filter(ctx, cs, pod, nodeInfo("allwhole", nil)); !st.IsSuccess() {
		t.Fatalf("a slice does not fit a node of switchable whole GPUs: %v", st)
	}
	if st := p.Reserve(ctx, cs, pod, "allwhole"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	n := p.cache.Node("allwhole")
	switched := 0
	for _, g := range n.MIG.GPUs {
		if g.Mode == mig.ModeMIG {
			switched++
		}
	}
	if switched != 1 {
		t.Errorf("%d GPUs committed to MIG mode for one slice, want 1", switched)
	}
}

// Requests a user can act on: both kinds in one container, zero, more than any node.
func TestWholeGPURequestRefusals(t *testing.T) {
	p := testPlugin(t, modes(accel("n", 1), "w"))
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{migPod("both", "nvidia.com/gpu", "1", "slicer.dev/mig-1g.10gb", "1"), "a container gets either whole GPUs or MIG slices"},
		{migPod("many", "nvidia.com/gpu", "17"), "at most 16 whole GPUs"},
	} {
		_, st := p.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nil)
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("PreFilter(%s) = %v, want unresolvable with %q", tc.pod.Name, st, tc.want)
		}
	}
}

// Filter and Score of a whole-GPU pod allocate nothing, on a Slicer node (8 GPUs, half whole,
// half switchable MIG) and on a node NVIDIA's device plugin serves.
func TestWholeFilterScoreDoNotAllocate(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, modes(accel("n1", 8), "wwwwdddd"))
	pod := migPod("a", "nvidia.com/gpu", "2")
	cs, _ := preFilter(t, p, pod)
	for _, ni := range []fwk.NodeInfo{nodeInfo("n1", nil), foreignNodeInfo("nv", 8, 2)} {
		allocs := testing.AllocsPerRun(100, func() {
			if st := p.Filter(ctx, cs, pod, ni); !st.IsSuccess() {
				t.Fatal(st)
			}
			p.Score(ctx, cs, pod, ni)
		})
		if allocs != 0 {
			t.Errorf("node %s: Filter+Score allocate %.0f times per call, want 0", ni.Node().Name, allocs)
		}
	}
}

// BenchmarkFilterScoreWhole is BenchmarkFilterScore for a pod of 2 whole GPUs.
func BenchmarkFilterScoreWhole(b *testing.B) {
	ctx := context.Background()
	m, _ := NewMetrics(nil)
	p := &Plugin{metrics: m, cache: snapshot.New(logr.Discard(), m), held: newNominations()}
	p.defrag = testDefragmenter(p, defragPolicy{mode: slicerv1alpha1.DefragmentationDisabled})
	p.cache.SetNodeAccelerator(modes(accel("n1", 8), "wwwwdddd"))
	pod := migPod("a", "nvidia.com/gpu", "2")
	cs := framework.NewCycleState()
	p.PreFilter(ctx, cs, pod, nil)
	for _, ni := range []fwk.NodeInfo{nodeInfo("n1", nil), foreignNodeInfo("nvidia", 8, 2)} {
		b.Run(ni.Node().Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Filter(ctx, cs, pod, ni)
				p.Score(ctx, cs, pod, ni)
			}
		})
	}
}
