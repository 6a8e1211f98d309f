package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/builder"
)

// memoFixture is a plugin with defragmentation on and the stores behind its listers, which a
// test changes as an informer does: the store first, then the handler that counts the change
// (watchDefragInputs).
type memoFixture struct {
	t                      *testing.T
	p                      *Plugin
	pods, pdbs, nodes, nss cache.Indexer
}

func newMemoFixture(t *testing.T, gpus int, spec *slicerv1alpha1.DefragmentationSpec) *memoFixture {
	t.Helper()
	f := &memoFixture{t: t, p: testPlugin(t, accel("n1", gpus))}
	byNS := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	f.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, byNS)
	f.pdbs = cache.NewIndexer(cache.MetaNamespaceKeyFunc, byNS)
	f.nodes = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	f.nss = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if spec == nil {
		spec = recommend
	}
	pol, err := newDefragPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	setDefragPolicy(f.p, pol)
	f.p.defrag.recorder = events.NewFakeRecorder(100)
	f.p.pods = corelisters.NewPodLister(f.pods)
	f.p.defrag.pods, f.p.defrag.pdbs = f.p.pods, policylisters.NewPodDisruptionBudgetLister(f.pdbs)
	f.p.defrag.nodes, f.p.defrag.namespaces = corelisters.NewNodeLister(f.nodes), corelisters.NewNamespaceLister(f.nss)
	f.set(f.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, nodeInputChanged)
	f.set(f.nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, namespaceInputChanged)
	return f
}

// set adds or updates obj in the store, then runs the handler as the informer would.
func (f *memoFixture) set(store cache.Indexer, obj any, changed func(old, cur any) bool) {
	f.t.Helper()
	old, ok, err := store.Get(obj)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := store.Update(obj); err != nil {
		f.t.Fatal(err)
	}
	h := f.p.defrag.inputHandler(changed)
	if ok {
		h.OnUpdate(old, obj)
	} else {
		h.OnAdd(obj, false)
	}
}

// blocker is a running pod holding one 1g.10gb at start on GPU gpu of n1; owned by a
// ReplicaSet unless bare.
func (f *memoFixture) blocker(name string, gpu, start int, bare bool, edit func(*corev1.Pod)) {
	f.t.Helper()
	pod := replica(name).Obj()
	if !bare {
		pod = ownedBy("ReplicaSet", pod)
	}
	if edit != nil {
		edit(pod)
	}
	f.set(f.pods, pod, podInputChanged)
	overlayPod{name: name, slots: []overlaySlot{{gpu, "1g.10gb", start}}}.allocateAs(f.t, f.p, pod.UID)
}

// attempt runs PreFilter and the defragmentation step of PostFilter for a pending pod.
func (f *memoFixture) attempt(pod *corev1.Pod) string {
	f.t.Helper()
	_, s := preFilter(f.t, f.p, pod)
	_, words := f.p.defrag.defragment(context.Background(), pod, s)
	return words
}

// searches is how many times the planner ran (the duration histogram's count).
func (f *memoFixture) searches() uint64 {
	f.t.Helper()
	var m dto.Metric
	if err := f.p.metrics.DefragPlanDuration.Write(&m); err != nil {
		f.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func pendingPod(ns, name, profile string) *corev1.Pod {
	return builder.Pod(ns, name).UID("uid-pending-"+ns+"-"+name).Container("c", builder.Limits(mig.ResourceName(profile), "1")).Obj()
}

// TestDefragMemoReusesAnswersWithoutPlan: two 1g.10gb pods no controller owns block 7g.80gb
// on both GPUs of n1, so no plan exists. The planner runs once for every pending 7g.80gb pod,
// whatever its namespace, labels or node filters (it reads none of them), and again for
// another profile; changes it does not read (a pending pod's status, a node's status, a pod
// that asks for no slice) keep the answer; each answer is counted.
func TestDefragMemoReusesAnswersWithoutPlan(t *testing.T) {
	f := newMemoFixture(t, 2, nil)
	f.blocker("a", 0, 3, true, nil)
	f.blocker("b", 1, 0, true, nil)
	noPlan := fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)

	first := pendingPod("ns", "big-1", "7g.80gb")
	if got := f.attempt(first); got != noPlan {
		t.Fatalf("first attempt: %q, want %q", got, noPlan)
	}
	other := pendingPod("other", "big-2", "7g.80gb")
	other.Labels = map[string]string{"team": "x"}
	other.Spec.NodeSelector = map[string]string{"zone": "b"}
	other.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	for i, pod := range []*corev1.Pod{first, other, first} {
		if got := f.attempt(pod); got != noPlan {
			t.Fatalf("attempt %d of %s: %q", i, pod.Name, got)
		}
	}
	if n := f.searches(); n != 1 {
		t.Fatalf("planner ran %d times for four attempts of one request, want 1", n)
	}

	// Changes the planner does not read.
	status := first.DeepCopy()
	status.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: noPlan}}
	f.set(f.pods, status, podInputChanged)
	node, _, _ := f.nodes.GetByKey("n1")
	beat := node.(*corev1.Node).DeepCopy()
	beat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	f.set(f.nodes, beat, nodeInputChanged)
	f.set(f.pods, builder.Pod("ns", "cpu").UID("uid-cpu").Node("n1").Container("c", builder.Limits("cpu", "1")).Obj(), podInputChanged)
	if got := f.attempt(other); got != noPlan || f.searches() != 1 {
		t.Fatalf("after changes the planner does not read: %q, %d searches, want the answer kept", got, f.searches())
	}

	// Another request is another key.
	if got := f.attempt(pendingPod("ns", "mid", "4g.40gb")); got != noPlan || f.searches() != 2 {
		t.Fatalf("a 4g.40gb: %q after %d searches, want a search of its own", got, f.searches())
	}
	for outcome, want := range map[mig.DefragOutcome]float64{mig.DefragNoPlan: 6, mig.DefragPlanned: 0} {
		var m dto.Metric
		if err := f.p.metrics.DefragPlans.WithLabelValues(string(outcome)).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("slicer_scheduler_defrag_plans_total{outcome=%q} = %v, want %v (every answer, reused or not)", outcome, got, want)
		}
	}
}

// TestDefragMemoForgetsOnAnyInputChange: a pending 7g.80gb pod gets no plan, twice (the
// second answer reused); then one input of the planner changes so that a plan exists, and the
// next attempt plans again and finds it.
func TestDefragMemoForgetsOnAnyInputChange(t *testing.T) {
	optedOut := func(p *corev1.Pod) { p.Annotations = map[string]string{slicerv1alpha1.AnnotationMovable: "false"} }
	pdb := func(allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	node := func(edit func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		edit(n)
		return n
	}
	selector := &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationRecommend, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"defrag": "yes"}}}
	for _, tc := range []struct {
		name   string
		spec   *slicerv1alpha1.DefragmentationSpec
		gpus   int
		setup  func(f *memoFixture) // blocks 7g.80gb on every GPU, with no plan
		change func(f *memoFixture) // opens a plan
		want   string
	}{
		{name: "the node is uncordoned", gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, nil)
			f.blocker("b", 1, 0, false, nil)
			f.set(f.nodes, node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), nodeInputChanged)
		}, change: func(f *memoFixture) {
			f.set(f.nodes, node(func(*corev1.Node) {}), nodeInputChanged)
		}, want: "1 move(s): move pod ns/"},
		{name: "a NoSchedule taint is removed", gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, nil)
			f.blocker("b", 1, 0, false, nil)
			f.set(f.nodes, node(func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
			}), nodeInputChanged)
		}, change: func(f *memoFixture) {
			f.set(f.nodes, node(func(*corev1.Node) {}), nodeInputChanged)
		}, want: "1 move(s): move pod ns/"},
		{name: "the node gets the label a pod selects", gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} })
			f.blocker("b", 1, 0, false, optedOut)
		}, change: func(f *memoFixture) {
			f.set(f.nodes, node(func(n *corev1.Node) { n.Labels = map[string]string{"zone": "a"} }), nodeInputChanged)
		}, want: "move pod ns/a (1g.10gb)"},
		{name: "a slice is freed", gpus: 3, setup: func(f *memoFixture) {
			// GPU 2 holds c (movable) and d (bare): moving c alone does not open it.
			f.blocker("a", 0, 3, false, optedOut)
			f.blocker("b", 1, 0, true, nil)
			f.blocker("c", 2, 3, false, nil)
			f.blocker("d", 2, 0, true, nil)
		}, change: func(f *memoFixture) {
			f.p.cache.DeleteAllocation("ns", "d-0")
		}, want: "move pod ns/c (1g.10gb)"},
		{name: "a pod is no longer opted out", gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, optedOut)
			f.blocker("b", 1, 0, false, optedOut)
		}, change: func(f *memoFixture) {
			f.set(f.pods, ownedBy("ReplicaSet", replica("b").Obj()), podInputChanged)
		}, want: "move pod ns/b (1g.10gb)"},
		{name: "a PodDisruptionBudget allows a disruption", gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, nil)
			f.blocker("b", 1, 0, false, nil)
			f.set(f.pdbs, pdb(0), pdbInputChanged)
		}, change: func(f *memoFixture) {
			f.set(f.pdbs, pdb(1), pdbInputChanged)
		}, want: "1 move(s): move pod ns/"},
		{name: "the namespace gets the selected label", spec: selector, gpus: 2, setup: func(f *memoFixture) {
			f.blocker("a", 0, 3, false, nil)
			f.blocker("b", 1, 0, false, nil)
		}, change: func(f *memoFixture) {
			f.set(f.nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"defrag": "yes"}}}, namespaceInputChanged)
		}, want: "1 move(s): move pod ns/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMemoFixture(t, tc.gpus, tc.spec)
			tc.setup(f)
			pending := pendingPod("ns", "big", "7g.80gb")
			for i := 0; i < 2; i++ {
				if got := f.attempt(pending); !strings.Contains(got, "found no plan") {
					t.Fatalf("attempt %d before the change: %q, want no plan", i, got)
				}
			}
			if n := f.searches(); n != 1 {
				t.Fatalf("%d searches before the change, want 1 (the second answer reused)", n)
			}
			tc.change(f)
			if got := f.attempt(pending); !strings.Contains(got, tc.want) {
				t.Fatalf("after the change: %q, want %q", got, tc.want)
			}
			if n := f.searches(); n != 2 {
				t.Fatalf("%d searches after the change, want 2", n)
			}
		})
	}
}

// TestDefragMemoOutlivesRoomTaken: the snapshot changes without freeing room (a slice taken on
// another GPU, with no pod event: the agents' and PreBind's writes that only take room), and
// the pending pod's NoPlan is reused; a 1g.10gb that fit before is searched again (FitsNow is
// not kept across it); then the slice is deleted, which may free room, and the 7g.80gb is
// searched again.
func TestDefragMemoOutlivesRoomTaken(t *testing.T) {
	f := newMemoFixture(t, 3, nil)
	f.blocker("a", 0, 3, true, nil)
	f.blocker("b", 1, 0, true, nil)
	f.blocker("c", 2, 0, true, nil)
	big, small := pendingPod("ns", "big", "7g.80gb"), pendingPod("ns", "small", "1g.10gb")
	if got := f.attempt(big); !strings.Contains(got, "found no plan") || f.searches() != 1 {
		t.Fatalf("first attempt: %q after %d searches, want no plan after 1", got, f.searches())
	}
	f.attempt(small)
	if n := f.searches(); n != 2 {
		t.Fatalf("%d searches after the 1g.10gb's first attempt, want 2", n)
	}
	gen := f.p.cache.Generation()
	overlayPod{name: "taken", slots: []overlaySlot{{2, "1g.10gb", 4}}}.allocateAs(t, f.p, "uid-taken")
	if f.p.cache.Generation() == gen {
		t.Fatal("taking a slice did not change the snapshot's generation")
	}
	if got := f.attempt(big); !strings.Contains(got, "found no plan") || f.searches() != 2 {
		t.Fatalf("after room was taken: %q after %d searches, want the answer reused (2)", got, f.searches())
	}
	f.attempt(small)
	if n := f.searches(); n != 3 {
		t.Fatalf("%d searches after the 1g.10gb's attempt on the fuller snapshot, want 3 (FitsNow not reused)", n)
	}
	f.p.cache.DeleteAllocation("ns", "taken-0")
	if got := f.attempt(big); !strings.Contains(got, "found no plan") || f.searches() != 4 {
		t.Fatalf("after a slice was deleted: %q after %d searches, want a new search (4)", got, f.searches())
	}
}

// TestDefragMemoKeepsOnlyWhatItMayReuse: a plan is never kept; an answer computed while an
// input changed is not kept; an answer without a plan outlives changes that only take room,
// FitsNow does not; room freed or an informer change drops every answer; the memo stays
// bounded; and readers and writers racing never get an answer across room freed.
func TestDefragMemoKeepsOnlyWhatItMayReuse(t *testing.T) {
	g1, g2 := memoGen{snapshot: 1}, memoGen{snapshot: 1, informers: 1}
	noPlan := mig.DefragResult{Outcome: mig.DefragNoPlan, Bounded: true, RemovalSets: 9}
	var m defragMemo
	m.put("7g.80gb", g1, g1, mig.DefragResult{Outcome: mig.DefragPlanned})
	if _, ok := m.get("7g.80gb", g1); ok {
		t.Fatal("a plan was kept")
	}
	m.put("7g.80gb", g1, g2, noPlan)
	if _, ok := m.get("7g.80gb", g1); ok {
		t.Fatal("an answer computed across an input change was kept")
	}
	m.put("7g.80gb", g1, g1, noPlan)
	if got, ok := m.get("7g.80gb", g1); !ok || got.Outcome != mig.DefragNoPlan || !got.Bounded {
		t.Fatalf("got %+v, %v; want the bounded NoPlan", got, ok)
	}
	if _, ok := m.get("7g.80gb", g2); ok {
		t.Fatal("an answer reused at another generation")
	}
	// The snapshot took room only (its Generation moved, FreedGeneration did not): an answer
	// without a plan still holds, FitsNow does not; room freed drops them all.
	taken, freed := memoGen{snapshot: 5}, memoGen{snapshot: 5, freed: 1}
	m.put("1g.10gb", g1, g1, mig.DefragResult{Outcome: mig.DefragFitsNow})
	for _, o := range []mig.DefragOutcome{mig.DefragNoPlan, mig.DefragFitsNow} {
		key := map[mig.DefragOutcome]string{mig.DefragNoPlan: "7g.80gb", mig.DefragFitsNow: "1g.10gb"}[o]
		if got, ok := m.get(key, g1); !ok || got.Outcome != o {
			t.Fatalf("%s at its own generation: %+v, %v", o, got, ok)
		}
		if _, ok := m.get(key, taken); ok != (o != mig.DefragFitsNow) {
			t.Errorf("%s after room was only taken: reused %v, want %v", o, ok, o != mig.DefragFitsNow)
		}
		if _, ok := m.get(key, freed); ok {
			t.Errorf("%s reused after room may have been freed", o)
		}
	}
	m.put("4g.40gb", g2, g2, noPlan)
	if _, ok := m.get("7g.80gb", g1); ok {
		t.Fatal("an older generation's answer kept beside a newer one")
	}
	for i := 0; i < 3*maxDefragMemo; i++ {
		m.put(strings.Repeat("x", i), g2, g2, noPlan)
	}
	if n := len(m.answers); n > maxDefragMemo {
		t.Fatalf("%d answers kept, bound %d", n, maxDefragMemo)
	}

	// Writers of several generations race; each answer's key names the generation it was
	// computed at, and no reader finds it where room was freed since or an informer counted.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	key := func(g memoGen) string { return fmt.Sprintf("%d/%d", g.freed, g.informers) }
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				g := memoGen{freed: uint64(i % 7), informers: uint64(w)}
				other := memoGen{freed: uint64((i + 1) % 7), informers: uint64(w)}
				m.put(key(g), g, g, noPlan)
				if _, ok := m.get(key(g), other); ok {
					mu.Lock()
					wrong = append(wrong, key(g)+" at "+key(other))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Errorf("answers found at another generation: %v", wrong[:min(len(wrong), 5)])
	}
}

// TestDefragInputChanges: which informer events count as a change of the planner's inputs.
func TestDefragInputChanges(t *testing.T) {
	mig1 := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := ownedBy("ReplicaSet", replica("a").Obj())
		if edit != nil {
			edit(p)
		}
		return p
	}
	pending := func(edit func(*corev1.Pod)) *corev1.Pod {
		return mig1(func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			if edit != nil {
				edit(p)
			}
		})
	}
	cpuPod := builder.Pod("ns", "cpu").UID("uid-cpu").Node("n1").Container("c", builder.Limits("cpu", "1")).Obj()
	n := func(edit func(*corev1.Node)) *corev1.Node {
		x := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}}
		if edit != nil {
			edit(x)
		}
		return x
	}
	for _, tc := range []struct {
		name      string
		changed   func(old, cur any) bool
		old, cur  any
		wantCount bool
	}{
		{"a pending pod's status", podInputChanged, pending(nil), pending(func(p *corev1.Pod) { p.Status.Message = "x" }), false},
		{"a pending pod added", podInputChanged, nil, pending(nil), false},
		{"a pending pod deleted", podInputChanged, pending(nil), nil, false},
		{"a pod bound", podInputChanged, pending(nil), mig1(nil), true},
		{"a running MIG pod's status", podInputChanged, mig1(nil), mig1(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), false},
		{"a running MIG pod opted out", podInputChanged, mig1(nil), mig1(func(p *corev1.Pod) {
			p.Annotations = map[string]string{slicerv1alpha1.AnnotationMovable: "false"}
		}), true},
		{"a running MIG pod relabelled", podInputChanged, mig1(nil), mig1(func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} }), true},
		{"a running MIG pod being deleted", podInputChanged, mig1(nil), mig1(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), true},
		{"a running MIG pod tolerates more", podInputChanged, mig1(nil), mig1(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
		}), true},
		{"a running MIG pod deleted", podInputChanged, mig1(nil), nil, true},
		{"a running MIG pod added", podInputChanged, nil, mig1(nil), true},
		{"a pod of no slice", podInputChanged, nil, cpuPod, false},
		{"a node's status", nodeInputChanged, n(nil), n(func(x *corev1.Node) { x.Status.Phase = corev1.NodeRunning }), false},
		{"a node cordoned", nodeInputChanged, n(nil), n(func(x *corev1.Node) { x.Spec.Unschedulable = true }), true},
		{"a node tainted", nodeInputChanged, n(nil), n(func(x *corev1.Node) { x.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} }), true},
		{"a node relabelled", nodeInputChanged, n(nil), n(func(x *corev1.Node) { x.Labels = nil }), true},
		{"a node added", nodeInputChanged, nil, n(nil), true},
		{"a node deleted", nodeInputChanged, n(nil), nil, true},
		{"a budget's healthy count", pdbInputChanged, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2}}, false},
		{"a budget's allowed disruptions", pdbInputChanged, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1}}, true},
		{"a budget's disrupted pods", pdbInputChanged, &policyv1.PodDisruptionBudget{}, &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{DisruptedPods: map[string]metav1.Time{"a": {}}}}, true},
		{"a budget added", pdbInputChanged, nil, &policyv1.PodDisruptionBudget{}, true},
		{"a namespace's annotations", namespaceInputChanged, &corev1.Namespace{}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}, false},
		{"a namespace's labels", namespaceInputChanged, &corev1.Namespace{}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d defragmenter
			h := d.inputHandler(tc.changed)
			switch {
			case tc.old == nil:
				h.OnAdd(tc.cur, false)
			case tc.cur == nil:
				h.OnDelete(cache.DeletedFinalStateUnknown{Key: "x", Obj: tc.old})
			default:
				h.OnUpdate(tc.old, tc.cur)
			}
			if got := d.inputs.Load() == 1; got != tc.wantCount {
				t.Errorf("counted %v, want %v", got, tc.wantCount)
			}
		})
	}
}
