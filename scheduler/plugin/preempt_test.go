package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	backendcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// TestReserveTakesTheClearedPlacement: Reserve puts a nominated pod on the placement
// preemption cleared for it, not where the policy alone would, and falls back to the policy
// when that placement is taken.
func TestReserveTakesTheClearedPlacement(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		taken     bool // another pod holds the cleared placement
		wantStart int
	}{
		{"cleared placement free", false, 0},
		{"cleared placement taken", true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 1))
			pod := migPod("high", "slicer.dev/mig-1g.10gb", "1")
			p.held.set(pod, "n1", overlayPod{name: "high", slots: []overlaySlot{{0, "1g.10gb", 0}}}.snapshotSlots(t), byPreemption, time.Time{})
			if tc.taken {
				overlayPod{name: "other", slots: []overlaySlot{{0, "1g.10gb", 0}}}.allocate(t, p)
			}
			cs := framework.NewCycleState()
			if _, st := p.PreFilter(ctx, cs, pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			if st := p.Reserve(ctx, cs, pod, "n1"); !st.IsSuccess() {
				t.Fatalf("Reserve: %v", st)
			}
			r := p.cache.Reservation(pod.UID)
			if r == nil || len(r.Slots) != 1 {
				t.Fatalf("reservation %+v", r)
			}
			got := r.Slots[0].Placement.Start
			if tc.wantStart >= 0 && got != tc.wantStart {
				t.Fatalf("reserved at %d, want the cleared placement %d", got, tc.wantStart)
			}
			if tc.wantStart < 0 && got == 0 {
				t.Fatal("reserved on a placement another pod holds")
			}
		})
	}
	// Without a nomination the policy does not choose start 0 for a 1g.10gb on an empty H100,
	// so the first case shows the nomination at work.
	as, err := mig.Place(mig.Node{GPUs: []mig.GPU{{State: mig.EmptyGPU(mig.H100_80GB), Usable: true}}},
		mig.MustRequest(mig.RequestItem{Profile: "1g.10gb", Count: 1}))
	if err != nil || as[0].Placement.Start == 0 {
		t.Fatalf("policy places a 1g.10gb at %+v (%v): pick another cleared start for this test", as, err)
	}
}

func TestPDBs(t *testing.T) {
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}}
	}
	pdb := func(ns string, allowed int32, sel map[string]string, disrupted ...string) *policyv1.PodDisruptionBudget {
		b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, DisruptedPods: map[string]metav1.Time{}}}
		for _, d := range disrupted {
			b.Status.DisruptedPods[d] = metav1.Now()
		}
		return b
	}
	app := map[string]string{"app": "x"}
	a, b, c := pod("a", app), pod("b", app), pod("c", nil)
	cases := []struct {
		name       string
		pdbs       []*policyv1.PodDisruptionBudget
		protects   []bool // a, b, c
		violations int    // evicting a, b, c
	}{
		{"none", nil, []bool{false, false, false}, 0},
		{"allows one", []*policyv1.PodDisruptionBudget{pdb("ns", 1, app)}, []bool{false, false, false}, 1},
		{"allows none", []*policyv1.PodDisruptionBudget{pdb("ns", 0, app)}, []bool{true, true, false}, 2},
		{"other namespace", []*policyv1.PodDisruptionBudget{pdb("other", 0, app)}, []bool{false, false, false}, 0},
		// As the Eviction API and the disruption controller read it (DefaultPreemption reads it
		// as matching nothing).
		{"empty selector matches every pod of the namespace", []*policyv1.PodDisruptionBudget{pdb("ns", 0, map[string]string{})}, []bool{true, true, true}, 3},
		{"no selector matches nothing", []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nil"}}}, []bool{false, false, false}, 0},
		{"already disrupted", []*policyv1.PodDisruptionBudget{pdb("ns", 0, app, "a")}, []bool{false, true, false}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i, p := range []*corev1.Pod{a, b, c} {
				if got := pdbProtects(p, tc.pdbs); got != tc.protects[i] {
					t.Errorf("pdbProtects(%s) = %v, want %v", p.Name, got, tc.protects[i])
				}
			}
			if got := pdbViolations([]*corev1.Pod{a, b, c}, tc.pdbs); got != tc.violations {
				t.Errorf("pdbViolations = %d, want %d", got, tc.violations)
			}
		})
	}
}

func TestEligibility(t *testing.T) {
	pr := testPreemptor(testPlugin(t))
	never := migPod("never", "slicer.dev/mig-1g.10gb", "1")
	never.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	if ok, msg := pr.PodEligibleToPreemptOthers(context.Background(), never, nil); ok || !strings.Contains(msg, "preemptionPolicy is Never") {
		t.Errorf("preemptionPolicy Never: eligible %v, %q", ok, msg)
	}
	if ok, _ := pr.PodEligibleToPreemptOthers(context.Background(), migPod("p", "slicer.dev/mig-1g.10gb", "1"), nil); !ok {
		t.Error("a pod with no nominated node is eligible")
	}
	victim := migPod("v", "slicer.dev/mig-1g.10gb", "1")
	if terminatingByPreemption(victim) {
		t.Error("a live pod is not terminating")
	}
	victim.DeletionTimestamp = ptr.To(metav1.Now())
	victim.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler}}
	if !terminatingByPreemption(victim) {
		t.Error("a preempted pod being deleted is terminating by preemption")
	}
}

func TestPreemptingMessage(t *testing.T) {
	slot := snapshot.Slot{Slot: mig.Slot{GPU: "GPU-1", Profile: "3g.40gb", Placement: mig.Placement{Start: 4, Size: 4}}}
	got := preemptingMessage("ns", "n1", dryPlan{slots: []snapshot.Slot{slot}, victims: []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f", "ns/g"}})
	want := "preemption: room cleared on node n1 at GPU-1 3g.40gb@4; waiting for 7 pods of lower priority to terminate: ns/a, ns/b, ns/c, ns/d, ns/e, 2 more"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// A tenant reads its own namespace's victims by name, the others counted.
	got = preemptingMessage("a", "n1", dryPlan{slots: []snapshot.Slot{slot}, victims: []string{"b/x", "a/y", "c/z"}})
	want = "preemption: room cleared on node n1 at GPU-1 3g.40gb@4; waiting for 3 pods of lower priority to terminate: a/y, 2 pods of other namespaces"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestNominatedPodWaitsForTheSliceOfADeletedVictim: once preemption has cleared a placement
// for a pod, the victim's pod can be gone before its allocation is being deleted (the garbage
// collector deletes it after the pod). The nominated pod must wait for that slice, not preempt
// again: its Filter still counts the slice taken, and a second preemption would evict more.
func TestNominatedPodWaitsForTheSliceOfADeletedVictim(t *testing.T) {
	p := testPlugin(t, accel("n1", 1))
	high := migPod("high", "slicer.dev/mig-3g.40gb", "1")
	p.held.set(high, "n1", overlayPod{name: "high", slots: []overlaySlot{{0, "3g.40gb", 4}}}.snapshotSlots(t), byPreemption, time.Time{})
	victim := overlayPod{name: "victim", slots: []overlaySlot{{0, "1g.10gb", 4}}}
	victim.allocate(t, p)
	kept := overlayPod{name: "kept", slots: []overlaySlot{{0, "1g.10gb", 0}}}
	kept.allocate(t, p)
	high.Status.NominatedNodeName = "n1"
	pr := testPreemptor(p)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	onNode := func(o overlayPod) *corev1.Pod {
		pod := o.pod()
		pod.Spec.NodeName = "n1"
		return pod
	}

	// Both pods still there: nothing to wait for (the victim is not terminating).
	pr.handle = snapshotHandle{snap: backendcache.NewSnapshot([]*corev1.Pod{onNode(victim), onNode(kept)}, []*corev1.Node{node})}
	if ok, msg := pr.PodEligibleToPreemptOthers(context.Background(), high, nil); !ok {
		t.Fatalf("with every pod present: not eligible: %s", msg)
	}
	// The victim's pod is gone, its allocation not yet deleting: wait for its slice only.
	pr.handle = snapshotHandle{snap: backendcache.NewSnapshot([]*corev1.Pod{onNode(kept)}, []*corev1.Node{node})}
	ok, msg := pr.PodEligibleToPreemptOthers(context.Background(), high, nil)
	if ok || !strings.Contains(msg, "pod ns/victim (deleted) to be released") {
		t.Fatalf("with the victim's pod gone: eligible %v, %q", ok, msg)
	}
	// A gone pod's slice outside the cleared placement is not waited for.
	pr.handle = snapshotHandle{snap: backendcache.NewSnapshot([]*corev1.Pod{onNode(victim)}, []*corev1.Node{node})}
	if ok, msg := pr.PodEligibleToPreemptOthers(context.Background(), high, nil); !ok {
		t.Fatalf("with a pod gone outside the cleared placement: not eligible: %s", msg)
	}
}

// testPreemptor is the test plugin's preemption without an evaluator (the tests call its
// preemption.Interface methods and its planning directly).
func testPreemptor(p *Plugin) *preemptor {
	return &preemptor{cache: p.cache, held: p.held, dryRun: map[types.UID]map[string]dryPlan{}}
}
