package plugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	backendcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// TestFilterHoldsRoomTheQueueLost: preemption cleared a 7g.80gb's room on n1 and its victim
// (a 1g.10gb) still holds a slice there; the framework adds no nominated pod (its queue lost
// the nomination for a while). Filter and Reserve still keep pods of lower or equal priority
// off that GPU, let pods of higher priority use it, and stop holding it once the informer shows
// the nominated pod deleted, bound, or nominated elsewhere.
func TestFilterHoldsRoomTheQueueLost(t *testing.T) {
	ctx := context.Background()
	high := overlayPod{name: "high", slots: []overlaySlot{{0, "7g.80gb", 0}}}
	withPrio := func(pod *corev1.Pod, prio int32) *corev1.Pod {
		pod.Spec.Priority = ptr.To(prio)
		return pod
	}
	for _, tc := range []struct {
		name     string
		prio     int32                         // of the pod filtered; the nominated pod's is 10
		informer func(*corev1.Pod) *corev1.Pod // the nominated pod as the informer has it; nil: no lister
		held     bool
	}{
		{name: "lower priority, no lister", prio: 5, held: true},
		{name: "equal priority", prio: 10, held: true},
		{name: "higher priority", prio: 20, held: false},
		{name: "nomination not yet in the informer", prio: 5, held: true,
			informer: func(p *corev1.Pod) *corev1.Pod { return p }},
		{name: "nominated there", prio: 5, held: true,
			informer: func(p *corev1.Pod) *corev1.Pod { p.Status.NominatedNodeName = "n1"; return p }},
		{name: "nominated elsewhere", prio: 5, held: false,
			informer: func(p *corev1.Pod) *corev1.Pod { p.Status.NominatedNodeName = "n2"; return p }},
		{name: "bound", prio: 5, held: false,
			informer: func(p *corev1.Pod) *corev1.Pod { p.Spec.NodeName = "n2"; return p }},
		{name: "being deleted", prio: 5, held: false,
			informer: func(p *corev1.Pod) *corev1.Pod { p.DeletionTimestamp = &metav1.Time{}; return p }},
		{name: "deleted", prio: 5, held: false,
			informer: func(*corev1.Pod) *corev1.Pod { return nil }},
		{name: "deleted and created again", prio: 5, held: false,
			informer: func(p *corev1.Pod) *corev1.Pod { p.UID = "other"; return p }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 2))
			overlayPod{name: "victim", slots: []overlaySlot{{0, "1g.10gb", 4}}}.allocate(t, p)
			nominated := withPrio(high.pod(), 10)
			p.held.set(nominated, "n1", high.snapshotSlots(t), byPreemption, time.Time{})
			if tc.informer != nil {
				idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
				if cur := tc.informer(withPrio(high.pod(), 10)); cur != nil {
					if err := idx.Add(cur); err != nil {
						t.Fatal(err)
					}
				}
				p.pods = corelisters.NewPodLister(idx)
			}
			// GPU 1 is taken whole, so only GPU 0 (the held one) could fit the pod.
			overlayPod{name: "other", slots: []overlaySlot{{1, "7g.80gb", 0}}}.allocate(t, p)
			pod := withPrio(migPod("mid", "slicer.dev/mig-1g.10gb", "1"), tc.prio)
			cs := framework.NewCycleState()
			if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			st := p.Filter(ctx, cs, pod, nodeInfo("n1", nil))
			if tc.held && st.Code() != fwk.Unschedulable {
				t.Fatalf("Filter = %v; want Unschedulable: the room is held for the nominated pod", st)
			}
			if !tc.held && !st.IsSuccess() {
				t.Fatalf("Filter = %v; want success", st)
			}
			rst := p.Reserve(ctx, cs, pod, "n1")
			if tc.held == rst.IsSuccess() {
				t.Fatalf("Reserve = %v; want success %v", rst, !tc.held)
			}
			forgotten := p.held.slots(nominated.UID, "n1") == nil
			if stale := tc.informer != nil && !tc.held; forgotten != stale {
				t.Fatalf("nomination forgotten %v; want %v", forgotten, stale)
			}
		})
	}
}

// TestFilterHoldsOnlyWhatTheFrameworkDidNotAdd: with the nominated pod added by the framework
// (AddPod, as when its queue lists it) the view is the same as with the plugin's record alone:
// the room is taken once, not twice.
func TestFilterHoldsOnlyWhatTheFrameworkDidNotAdd(t *testing.T) {
	ctx := context.Background()
	p := testPlugin(t, accel("n1", 1))
	x := overlayPod{name: "x", slots: []overlaySlot{{0, "3g.40gb", 4}}}
	p.held.set(x.pod(), "n1", x.snapshotSlots(t), byPreemption, time.Time{})
	low := migPod("low", "slicer.dev/mig-4g.40gb", "1")
	for _, added := range []bool{false, true} {
		cs := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, low, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		if added {
			if st := p.AddPod(ctx, cs, low, mustPodInfo(t, x.pod()), nodeInfo("n1", nil)); !st.IsSuccess() {
				t.Fatal(st)
			}
		}
		view := p.nodeView(cs, p.cache.Node("n1"), low)
		if !view.GPUs[0].Usable || view.GPUs[0].State.FreeComputeSlices() != 4 {
			t.Fatalf("added %v: GPU 0 usable %v with %d free compute slices; want the 3g.40gb at 4 taken once",
				added, view.GPUs[0].Usable, view.GPUs[0].State.FreeComputeSlices())
		}
		if st := p.Filter(ctx, cs, low, nodeInfo("n1", nil)); !st.IsSuccess() {
			t.Fatalf("added %v: Filter(4g.40gb) = %v; the 4g.40gb at 0 is free", added, st)
		}
	}
}

// TestForgetIdleNomination: preemption's record is kept while the nominated pod waits for a
// victim, and dropped once it waits for nothing there; a defragmentation plan's record is left
// to the plan (defrag_evict.go).
func TestForgetIdleNomination(t *testing.T) {
	high := overlayPod{name: "high", slots: []overlaySlot{{0, "3g.40gb", 4}}}
	victim := overlayPod{name: "victim", slots: []overlaySlot{{0, "1g.10gb", 4}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	onNode := func(pod *corev1.Pod, terminating bool) *corev1.Pod {
		pod.Spec.NodeName = "n1"
		if terminating {
			pod.DeletionTimestamp = &metav1.Time{}
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: corev1.PodReasonPreemptionByScheduler}}
		}
		return pod
	}
	for _, tc := range []struct {
		name        string
		kind        nominationKind
		terminating bool // the victim is being preempted
		kept        bool
	}{
		{"waiting for the victim", byPreemption, true, true},
		{"waiting for nothing", byPreemption, false, false},
		{"defragmentation's", byPlan, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 1))
			victim.allocate(t, p)
			nominated := high.pod()
			nominated.Spec.Priority = ptr.To[int32](10)
			p.held.set(nominated, "n1", high.snapshotSlots(t), tc.kind, time.Now().Add(time.Minute))
			pr := testPreemptor(p)
			pr.handle = snapshotHandle{snap: backendcache.NewSnapshot([]*corev1.Pod{onNode(victim.pod(), tc.terminating)}, []*corev1.Node{node})}
			pr.forgetIdle(nominated)
			if kept := p.held.slots(high.pod().UID, "n1") != nil; kept != tc.kept {
				t.Fatalf("kept %v, want %v", kept, tc.kept)
			}
			if p.held.on("n1") != tc.kept {
				t.Fatalf("node index says %v, want %v", p.held.on("n1"), tc.kept)
			}
		})
	}
}

// TestFilterHoldsAPlansRoom: a defragmentation plan's pod's nomination (not preemption's) is
// held against pods of equal priority the framework does not know to keep off (after a restart,
// or before its nominatedNodeName is written) while the plan's moves are under way, and no
// longer once its moves' time is over.
func TestFilterHoldsAPlansRoom(t *testing.T) {
	ctx := context.Background()
	big := overlayPod{name: "big", slots: []overlaySlot{{0, "7g.80gb", 0}}}
	for _, waiting := range []bool{true, false} {
		p := testPlugin(t, accel("n1", 2))
		overlayPod{name: "moved", slots: []overlaySlot{{0, "1g.10gb", 4}}}.allocate(t, p)
		overlayPod{name: "other", slots: []overlaySlot{{1, "7g.80gb", 0}}}.allocate(t, p)
		until := time.Now().Add(-time.Second) // the plan's moves' time is over
		if waiting {
			until = time.Now().Add(time.Minute)
		}
		p.held.set(big.pod(), "n1", big.snapshotSlots(t), byPlan, until)
		pod := migPod("rival", "slicer.dev/mig-1g.10gb", "1")
		cs := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		st := p.Filter(ctx, cs, pod, nodeInfo("n1", nil))
		if waiting && st.Code() != fwk.Unschedulable {
			t.Fatalf("plan waiting: Filter = %v; want Unschedulable, the GPU is being cleared for big", st)
		}
		if !waiting && !st.IsSuccess() {
			t.Fatalf("no plan waiting: Filter = %v; want success", st)
		}
	}
}

// TestForgetDeletedPod: a pod deleted takes its nomination, dry run, rejection, PreBind failure
// and plan state out of the plugin's memory (the pod informer's delete handler), whether or not
// any Filter looks at its node again; the rooms its plan holds for replacements stay.
func TestForgetDeletedPod(t *testing.T) {
	p := testPlugin(t, accel("n1", 1))
	p.preemptor = testPreemptor(p)
	pod := migPod("gone", "slicer.dev/mig-1g.10gb", "1")
	slot := snapshot.Slot{Slot: mig.Slot{GPU: "GPU-n10", Profile: "1g.10gb", Placement: mig.Placement{Start: 0, Size: 1}}}
	p.held.set(pod, "n1", []snapshot.Slot{slot}, byPreemption, time.Time{})
	p.rejected[pod.UID] = pod
	p.prebindFailed[pod.UID] = true
	p.preemptor.putDryRun(pod.UID, "n1", dryPlan{slots: []snapshot.Slot{slot}})
	p.defrag.evictor.run.plans = map[types.UID]time.Time{pod.UID: time.Now()}
	p.defrag.evictor.addPledge(&pledge{key: "defrag-pledge-1", pending: pod})

	p.forgetDeletedPod(cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: pod})

	if p.held.slots(pod.UID, "n1") != nil || p.held.on("n1") {
		t.Error("the deleted pod's nomination is kept")
	}
	if _, ok := p.rejected[pod.UID]; ok {
		t.Error("the deleted pod is still among the rejected")
	}
	if p.prebindFailed[pod.UID] || p.preemptor.dryRun[pod.UID] != nil || !p.defrag.evictor.run.plans[pod.UID].IsZero() {
		t.Error("the deleted pod's PreBind failure, dry run or plan is kept")
	}
	if len(p.defrag.evictor.run.pledges) != 1 {
		t.Error("the room held for a replacement went with the pending pod")
	}
}
