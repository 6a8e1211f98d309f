package plugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// TestEvictionRefusal: which of a plan's moved pods the Eviction API would refuse, as
// k8s.io/kubernetes/pkg/registry/core/pod/storage/eviction.go decides.
func TestEvictionRefusal(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, ready bool, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}, Status: corev1.PodStatus{Phase: phase}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	budget := func(name string, allowed int32, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	app := map[string]string{"app": "web"}
	a, b := pod("a", corev1.PodRunning, true, app), pod("b", corev1.PodRunning, true, app)
	unready := pod("u", corev1.PodRunning, false, app)
	always := budget("always", 0, web)
	always.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
	healthy := budget("healthy", 0, web)
	healthy.Status.CurrentHealthy, healthy.Status.DesiredHealthy = 2, 1
	for _, tc := range []struct {
		name    string
		pods    []*corev1.Pod
		pdbs    []*policyv1.PodDisruptionBudget
		refused int
	}{
		{"no budget", []*corev1.Pod{a, b}, nil, -1},
		{"a budget allowing one: the second is refused", []*corev1.Pod{a, b}, []*policyv1.PodDisruptionBudget{budget("one", 1, web)}, 1},
		{"a budget allowing two", []*corev1.Pod{a, b}, []*policyv1.PodDisruptionBudget{budget("two", 2, web)}, -1},
		{"an empty selector covers every pod of the namespace", []*corev1.Pod{pod("c", corev1.PodRunning, true, nil)},
			[]*policyv1.PodDisruptionBudget{budget("all", 0, &metav1.LabelSelector{})}, 0},
		{"no selector covers none", []*corev1.Pod{a}, []*policyv1.PodDisruptionBudget{budget("none", 0, nil)}, -1},
		{"a budget of another namespace", []*corev1.Pod{a}, []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "other"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: web}}}, -1},
		{"two budgets cover it", []*corev1.Pod{a}, []*policyv1.PodDisruptionBudget{budget("one", 1, web), budget("two", 2, web)}, 0},
		{"a Pending pod goes whatever its budget", []*corev1.Pod{pod("p", corev1.PodPending, false, app)}, []*policyv1.PodDisruptionBudget{budget("zero", 0, web)}, -1},
		{"an unready pod, AlwaysAllow", []*corev1.Pod{unready}, []*policyv1.PodDisruptionBudget{always}, -1},
		{"an unready pod, healthy pods enough", []*corev1.Pod{unready}, []*policyv1.PodDisruptionBudget{healthy}, -1},
		{"a ready pod, healthy pods enough, none allowed", []*corev1.Pod{a}, []*policyv1.PodDisruptionBudget{healthy}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := evictionRefusal(tc.pods, tc.pdbs); got != tc.refused {
				t.Fatalf("refused %d (%s); want %d", got, why, tc.refused)
			}
		})
	}
}

// TestPlanSparingSparesAPartialBudget: a 7g.80gb clears the GPU whose pods a budget allowing one
// disruption does not cover (three victims) rather than the one where it would evict two pods of
// that budget (two victims, one violation): DefaultPreemption reprieves the violating victim when
// the pod fits without it, and the plan without it exists on the other GPU.
func TestPlanSparingSparesAPartialBudget(t *testing.T) {
	p := testPlugin(t, accel("n1", 2))
	holders := []struct {
		name    string
		gpu     int
		profile string
		start   int
		labels  map[string]string
	}{
		{"p1", 0, "3g.40gb", 0, map[string]string{"app": "x"}}, {"p2", 0, "3g.40gb", 4, map[string]string{"app": "x"}},
		{"q1", 1, "2g.20gb", 0, nil}, {"q2", 1, "2g.20gb", 2, nil}, {"q3", 1, "3g.40gb", 4, nil},
	}
	cands := map[types.UID]fwk.PodInfo{}
	for _, h := range holders {
		uid := types.UID("uid-" + h.name)
		prof, err := mig.H100_80GB.Profile(h.profile)
		if err != nil {
			t.Fatal(err)
		}
		p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: h.name + "-0", PodName: h.name, PodUID: uid, NodeName: "n1",
			Slot: snapshot.Slot{Slot: mig.Slot{GPU: "GPU-n1" + string(rune('0'+h.gpu)), Profile: h.profile,
				Placement: mig.Placement{Start: h.start, Size: prof.MemorySlices}}}})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: h.name, UID: uid, Labels: h.labels},
			Spec: corev1.PodSpec{Priority: ptr.To[int32](10)}}
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			t.Fatal(err)
		}
		cands[uid] = pi
	}
	pdbs := []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}}}
	req := mig.MustRequest(mig.RequestItem{Profile: "7g.80gb", Count: 1})
	plan, ok, err := testPreemptor(p).planSparing(p.cache.Node("n1"), p.cache.Claims("n1"), cands, req, 100, pdbs)
	if err != nil || !ok {
		t.Fatalf("no plan: %v", err)
	}
	got := map[string]bool{}
	for _, o := range plan.Owners {
		got[o] = true
	}
	if len(got) != 3 || !got["uid-q1"] || !got["uid-q2"] || !got["uid-q3"] {
		t.Fatalf("victims %v; want q1, q2, q3 (p1 and p2 together violate their budget)", plan.Owners)
	}
	// Without the budget the fewest victims win.
	plan, ok, err = testPreemptor(p).planSparing(p.cache.Node("n1"), p.cache.Claims("n1"), cands, req, 100, nil)
	if err != nil || !ok || len(plan.Owners) != 2 {
		t.Fatalf("without a budget: victims %v (%v, %v); want p1 and p2", plan.Owners, ok, err)
	}
}
