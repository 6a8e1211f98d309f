package plugin

import (
	"context"
	"sort"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

func allocation(name, podUID, node, gpu, profile string, start, size int32) *slicerv1alpha1.SliceAllocation {
	return builder.Allocation("ns", name).Typed().Pod("holder", podUID).Node(node).GPU(gpu).Profile(profile, start, size).Obj()
}

// accelWith is accel("n1", 1), typed, with two 3g.40gb slices on its GPU, changed by each
// mutation.
func accelWith(mutate ...func(*slicerv1alpha1.NodeAccelerator)) *slicerv1alpha1.NodeAccelerator {
	na := builder.Accelerator("n1").Typed().GPU("GPU-n10", "H100-80GB").Slices(0,
		slicerv1alpha1.MIGSlice{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 4}},
		slicerv1alpha1.MIGSlice{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 4}},
	).Obj()
	for _, m := range mutate {
		m(na)
	}
	return na
}

func withCondition(t string, status metav1.ConditionStatus) func(*slicerv1alpha1.NodeAccelerator) {
	return func(na *slicerv1alpha1.NodeAccelerator) {
		na.Status.Conditions = append(na.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: "Test"})
	}
}

func TestQueueingHints(t *testing.T) {
	migP := migPod("p", "slicer.dev/mig-3g.40gb", "1")
	plain := migPod("plain", "cpu", "1")
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
	}
	migLabel := map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: "all-1g.10gb"}

	for _, tc := range []struct {
		name     string
		hint     fwk.QueueingHintFn
		pod      *corev1.Pod
		old, new any
		want     fwk.QueueingHint
		wantErr  bool
	}{
		// Nodes.
		{name: "node added", hint: queueOnNode, pod: migP, new: node(nil), want: fwk.Queue},
		{name: "node added, pod without slices", hint: queueOnNode, pod: plain, new: node(nil), want: fwk.QueueSkip},
		{name: "MIG manager label removed", hint: queueOnNode, pod: migP, old: node(migLabel), new: node(nil), want: fwk.Queue},
		{name: "MIG manager label added", hint: queueOnNode, pod: migP, old: node(nil), new: node(migLabel), want: fwk.QueueSkip},
		{name: "unrelated label changed", hint: queueOnNode, pod: migP, old: node(nil), new: node(map[string]string{"zone": "a"}),
			want: fwk.QueueSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.hint(logr.Discard(), tc.pod, tc.old, tc.new)
			if (err != nil) != tc.wantErr {
				t.Errorf("error %v, want error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hint (-want +got):\n%s", diff)
			}
		})
	}
}

// activations records the pods the plugin activates.
type activations struct {
	fwk.Handle
	mu   sync.Mutex
	pods []string
}

func (a *activations) Activate(_ klog.Logger, pods map[string]*corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range pods {
		a.pods = append(a.pods, k)
	}
	sort.Strings(a.pods)
}

func (a *activations) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.pods
	a.pods = nil
	return out
}

// racePlugin is a plugin with one H100 on n1, fully held by another pod's
// 7g allocation, wired as NewFactory wires it.
func racePlugin(t *testing.T) (*Plugin, *activations) {
	t.Helper()
	p := testPlugin(t, accel("n1", 1))
	h := &activations{}
	p.handle = h
	p.cache.OnFreed(func() { p.activateRejected(logr.Discard()) })
	a := allocation("held", "uid-other", "n1", "GPU-n10", "7g.80gb", 0, 8)
	p.cache.SetAllocation(snapshot.AllocationFromObject(a))
	h.take()
	return p, h
}

// rejectCycle runs a scheduling cycle of pod that finds no room; between
// runs after Filter, before PostFilter.
func rejectCycle(t *testing.T, p *Plugin, pod *corev1.Pod, between func()) {
	t.Helper()
	ctx := context.Background()
	cs := framework.NewCycleState()
	if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := p.Filter(ctx, cs, pod, nodeInfo("n1", nil)); st.Code() != fwk.Unschedulable {
		t.Fatalf("Filter: %v, want Unschedulable", st)
	}
	between()
	if _, st := p.PostFilter(ctx, cs, pod, nil); st.Code() != fwk.Unschedulable {
		t.Fatalf("PostFilter: %v", st)
	}
}

// The scheduler's informers and the snapshot's are separate: the scheduler
// may retry a pod on an allocation's delete before the snapshot has seen it.
// The snapshot's own catch-up must then retry the pod, whenever it lands.
func TestRejectedPodRetriedWhenSnapshotCatchesUp(t *testing.T) {
	pod := migPod("waiting", "slicer.dev/mig-7g.80gb", "1")
	want := []string{"ns/waiting"}
	deleteHeld := func(p *Plugin) func() { return func() { p.cache.DeleteAllocation("ns", "held") } }
	nothing := func() {}

	t.Run("snapshot catches up after the pod was rejected", func(t *testing.T) {
		p, h := racePlugin(t)
		rejectCycle(t, p, pod, nothing)
		if got := h.take(); len(got) != 0 {
			t.Fatalf("activated %v before any room was freed", got)
		}
		deleteHeld(p)()
		if diff := cmp.Diff(want, h.take()); diff != "" {
			t.Errorf("activated (-want +got):\n%s", diff)
		}
	})
	t.Run("snapshot catches up while the pod is judged", func(t *testing.T) {
		p, h := racePlugin(t)
		rejectCycle(t, p, pod, deleteHeld(p))
		if diff := cmp.Diff(want, h.take()); diff != "" {
			t.Errorf("activated (-want +got):\n%s", diff)
		}
	})
	t.Run("a reservation dropped while the pod is judged", func(t *testing.T) {
		p, h := testPlugin(t, accel("n1", 1)), &activations{}
		p.handle = h
		p.cache.OnFreed(func() { p.activateRejected(logr.Discard()) })
		other := &snapshot.Reservation{PodUID: "uid-other", Namespace: "ns", PodName: "other", NodeName: "n1",
			Slots: []snapshot.Slot{{Slot: mig.Slot{GPU: "GPU-n10", Profile: "7g.80gb", Placement: mig.Placement{Start: 0, Size: 8}}}}}
		if err := p.cache.Reserve(other); err != nil {
			t.Fatal(err)
		}
		rejectCycle(t, p, pod, func() { p.cache.Unreserve("uid-other") })
		if diff := cmp.Diff(want, h.take()); diff != "" {
			t.Errorf("activated (-want +got):\n%s", diff)
		}
	})
	t.Run("changes that free nothing retry nothing", func(t *testing.T) {
		p, h := racePlugin(t)
		rejectCycle(t, p, pod, nothing)
		// Another allocation appears, the pod holding the GPU is bound
		// (its committed reservation gives way to its allocation), a
		// deletion of an unknown allocation.
		p.cache.SetAllocation(snapshot.AllocationFromObject(allocation("more", "uid-third", "n1", "GPU-n11", "1g.10gb", 0, 1)))
		held := snapshot.AllocationFromObject(allocation("held", "uid-other", "n1", "GPU-n10", "7g.80gb", 0, 8))
		if err := p.cache.Reserve(&snapshot.Reservation{PodUID: "uid-other", Namespace: "ns", PodName: "holder", NodeName: "n1",
			Slots: []snapshot.Slot{held.Slot}}); err != nil {
			t.Fatal(err)
		}
		p.cache.Commit("uid-other")
		p.cache.Unreserve("uid-other")
		p.cache.DeleteAllocation("ns", "unknown")
		// The agent rewrites the NodeAccelerator with nothing freed.
		same := accel("n1", 1)
		same.ResourceVersion = "42"
		p.cache.SetNodeAccelerator(same)
		if got := h.take(); len(got) != 0 {
			t.Errorf("activated %v, want none", got)
		}
		// The allocation is deleted: now the pod is retried.
		p.cache.DeleteAllocation("ns", "held")
		if diff := cmp.Diff(want, h.take()); diff != "" {
			t.Errorf("activated (-want +got):\n%s", diff)
		}
	})
	t.Run("a GPU healthy again in the snapshot", func(t *testing.T) {
		p, h := testPlugin(t), &activations{}
		p.handle = h
		p.cache.OnFreed(func() { p.activateRejected(logr.Discard()) })
		sick := accel("n1", 1)
		sick.Status.GPUs[0].Health = "Unhealthy"
		p.cache.SetNodeAccelerator(sick)
		rejectCycle(t, p, pod, nothing)
		if got := h.take(); len(got) != 0 {
			t.Fatalf("activated %v before any room was freed", got)
		}
		p.cache.SetNodeAccelerator(accel("n1", 1))
		if diff := cmp.Diff(want, h.take()); diff != "" {
			t.Errorf("activated (-want +got):\n%s", diff)
		}
	})
}

// MayFreeRoom decides which NodeAccelerator changes wake rejected MIG pods
// (through the snapshot's Cache.OnFreed).
func TestMayFreeRoom(t *testing.T) {
	full := accelWith()
	oneSlice := accelWith(func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs[0].Slices = na.Status.GPUs[0].Slices[:1] })
	unhealthy := accelWith(func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs[0].Health = "Unhealthy" })
	for _, tc := range []struct {
		name     string
		old, new *slicerv1alpha1.NodeAccelerator
		frees    bool
	}{
		{name: "slice released", old: full, new: oneSlice, frees: true},
		{name: "slice added", old: oneSlice, new: full},
		{name: "nothing that frees room changed", old: full, new: accelWith(func(na *slicerv1alpha1.NodeAccelerator) {
			na.ResourceVersion = "42"
		}, withCondition("SomethingElse", metav1.ConditionTrue))},
		{name: "another driver, which may have profiles the older lacked", old: full, new: accelWith(func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.DriverVersion = "580.1"
		}), frees: true},
		{name: "GPU healthy again", old: unhealthy, new: full, frees: true},
		{name: "GPU unhealthy", old: full, new: unhealthy},
		{name: "MIG mode enabled", old: accelWith(func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs[0].MIGMode = "Disabled" }), new: full, frees: true},
		{name: "GPU added", old: full, new: accelWith(func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs = append(na.Status.GPUs, accel("n1", 2).Status.GPUs[1])
		}), frees: true},
		{name: "GPU gone", old: full, new: accelWith(func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs = nil })},
		{name: "ownership conflict cleared", old: accelWith(withCondition(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionTrue)),
			new: accelWith(withCondition(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionFalse)), frees: true},
		{name: "driver not ready", old: full, new: accelWith(withCondition(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionTrue))},
		{name: "driver ready again", old: accelWith(withCondition(slicerv1alpha1.ConditionDriverNotReady, metav1.ConditionTrue)), new: full, frees: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if why := snapshot.MayFreeRoom(tc.old, tc.new); (why != "") != tc.frees {
				t.Fatalf("MayFreeRoom = %q, want room freed %v", why, tc.frees)
			}
		})
	}
}
