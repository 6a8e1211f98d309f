package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
	"github.com/slicer-operator/slicer/test/builder"
)

// replica is a running pod a ReplicaSet owns, bound to n1, with the given UID.
func replica(name string) *builder.PodBuilder {
	return builder.Pod("ns", name).UID("uid-"+name).Node("n1").Label("app", "web").Container("c", builder.Limits("slicer.dev/mig-1g.10gb", "1"))
}

func ownedBy(kind string, p *corev1.Pod) *corev1.Pod {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "web", UID: "rs-uid", Controller: ptr.To(true)}}
	return p
}

// TestDefragmentRecommends: two H100s each blocked for 7g.80gb by one 1g.10gb pod; the plan
// moves one of them when it may be moved, and the words and the Event name the move.
func TestDefragmentRecommends(t *testing.T) {
	pdbZero := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
	for _, tc := range []struct {
		name   string
		spec   *slicerv1alpha1.DefragmentationSpec
		pods   func() (a, b *corev1.Pod)
		pdbs   []*policyv1.PodDisruptionBudget
		nsLbls map[string]string
		node   func(*corev1.Node) // changes node n1 as the scheduler's node informer has it
		want   string             // substring of the words; "" for none
		event  bool
	}{
		{name: "ReplicaSet pods move", pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
		}, want: "defragmentation (Recommend, nothing evicted): 1 move(s): move pod ns/", event: true},
		{name: "disabled", spec: &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationDisabled},
			pods: func() (*corev1.Pod, *corev1.Pod) {
				return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
			}},
		{name: "bare pods never move", pods: func() (*corev1.Pod, *corev1.Pod) {
			return replica("a").Obj(), replica("b").Obj()
		}, want: fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)},
		{name: "DaemonSet pods never move", pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("DaemonSet", replica("a").Obj()), ownedBy("DaemonSet", replica("b").Obj())
		}, want: "found no plan"},
		{name: "pods of two slices never move", pods: func() (*corev1.Pod, *corev1.Pod) {
			two := builder.Pod("ns", "a").UID("uid-a").Node("n1").Container("c", builder.Limits("slicer.dev/mig-1g.10gb", "2")).Obj()
			return ownedBy("ReplicaSet", two), ownedBy("ReplicaSet", replica("b").Annotation(slicerv1alpha1.AnnotationMovable, "false").Obj())
		}, want: "found no plan"},
		{name: "movable false", pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("ReplicaSet", replica("a").Annotation(slicerv1alpha1.AnnotationMovable, "false").Obj()),
				ownedBy("ReplicaSet", replica("b").Annotation(slicerv1alpha1.AnnotationMovable, "false").Obj())
		}, want: "found no plan"},
		{name: "one movable false, the other moves", pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("ReplicaSet", replica("a").Annotation(slicerv1alpha1.AnnotationMovable, "false").Obj()),
				ownedBy("ReplicaSet", replica("b").Obj())
		}, want: "move pod ns/b (1g.10gb)", event: true},
		{name: "a PDB allows no disruption", pdbs: []*policyv1.PodDisruptionBudget{pdbZero}, pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
		}, want: "found no plan"},
		{name: "namespace outside the selector",
			spec: &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationRecommend, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"defrag": "yes"}}},
			pods: func() (*corev1.Pod, *corev1.Pod) {
				return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
			}, want: "found no plan"},
		{name: "namespace inside the selector", nsLbls: map[string]string{"defrag": "yes"},
			spec: &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationRecommend, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"defrag": "yes"}}},
			pods: func() (*corev1.Pod, *corev1.Pod) {
				return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
			}, want: "1 move(s)", event: true},
		{name: "a NoSchedule taint neither pod tolerates: their replacements could not come back", node: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
		}, pods: func() (*corev1.Pod, *corev1.Pod) {
			return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
		}, want: "found no plan"},
		{name: "a NoSchedule taint one pod tolerates: that one moves", node: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
		}, pods: func() (*corev1.Pod, *corev1.Pod) {
			b := ownedBy("ReplicaSet", replica("b").Obj())
			b.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}
			return ownedBy("ReplicaSet", replica("a").Obj()), b
		}, want: "move pod ns/b (1g.10gb)", event: true},
		{name: "a cordoned node", node: func(n *corev1.Node) { n.Spec.Unschedulable = true },
			pods: func() (*corev1.Pod, *corev1.Pod) {
				return ownedBy("ReplicaSet", replica("a").Obj()), ownedBy("ReplicaSet", replica("b").Obj())
			}, want: "found no plan"},
		{name: "a node selector the node does not match", pods: func() (*corev1.Pod, *corev1.Pod) {
			a := ownedBy("ReplicaSet", replica("a").Obj())
			a.Spec.NodeSelector = map[string]string{"zone": "b"}
			return a, ownedBy("ReplicaSet", replica("b").Obj())
		}, want: "move pod ns/b (1g.10gb)", event: true},
		{name: "a node selector the node matches", node: func(n *corev1.Node) { n.Labels = map[string]string{"zone": "a"} },
			pods: func() (*corev1.Pod, *corev1.Pod) {
				a := ownedBy("ReplicaSet", replica("a").Obj())
				a.Spec.NodeSelector = map[string]string{"zone": "a"}
				b := ownedBy("ReplicaSet", replica("b").Annotation(slicerv1alpha1.AnnotationMovable, "false").Obj())
				return a, b
			}, want: "move pod ns/a (1g.10gb)", event: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, accel("n1", 2))
			a, b := tc.pods()
			// a at 1g.10gb@3 on GPU 0, b at 1g.10gb@0 on GPU 1: a 7g.80gb fits neither.
			overlayPod{name: "a", slots: []overlaySlot{{0, "1g.10gb", 3}}}.allocateAs(t, p, a.UID)
			overlayPod{name: "b", slots: []overlaySlot{{1, "1g.10gb", 0}}}.allocateAs(t, p, b.UID)
			rec := events.NewFakeRecorder(10)
			withDefrag(t, p, tc.spec, rec, []*corev1.Pod{a, b}, tc.pdbs, tc.nsLbls)
			n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			if tc.node != nil {
				tc.node(n1)
			}
			p.defrag.nodes = nodeLister(t, n1)

			pending := migPod("big", "slicer.dev/mig-7g.80gb", "1")
			_, s := preFilter(t, p, pending)
			_, got := p.defrag.defragment(context.Background(), pending, s)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("words %q, want %q", got, tc.want)
			}
			select {
			case e := <-rec.Events:
				if !tc.event {
					t.Fatalf("unexpected event %q", e)
				}
				if !strings.Contains(e, slicerv1alpha1.EventDefragmentationPlanned) || !strings.Contains(e, "then 7g.80gb fits on node n1 GPU") {
					t.Fatalf("event %q", e)
				}
			default:
				if tc.event {
					t.Fatal("no DefragmentationPlanned event")
				}
			}
		})
	}
}

// TestDefragmentOnlyOneSlice: a pod of two slices gets no plan, and says so.
func TestDefragmentOnlyOneSlice(t *testing.T) {
	p := testPlugin(t, accel("n1", 1))
	withDefrag(t, p, nil, events.NewFakeRecorder(1), nil, nil, nil)
	pending := migPod("two", "slicer.dev/mig-1g.10gb", "2")
	_, s := preFilter(t, p, pending)
	if _, got := p.defrag.defragment(context.Background(), pending, s); got != "defragmentation plans for pods of one slice only" {
		t.Fatalf("got %q", got)
	}
}

func TestNewDefragPolicy(t *testing.T) {
	for _, tc := range []struct {
		spec     *slicerv1alpha1.DefragmentationSpec
		mode     slicerv1alpha1.DefragmentationMode
		maxMoves int
		err      bool
	}{
		{nil, slicerv1alpha1.DefaultDefragmentationMode, mig.DefaultDefragMoves, false},
		{&slicerv1alpha1.DefragmentationSpec{}, slicerv1alpha1.DefaultDefragmentationMode, mig.DefaultDefragMoves, false},
		{&slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationDisabled, MaxMovesPerPlan: 3}, slicerv1alpha1.DefragmentationDisabled, 3, false},
		{&slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict, MaxMovesPerPlan: 9}, slicerv1alpha1.DefragmentationEvict, 4, false},
		{&slicerv1alpha1.DefragmentationSpec{Mode: "Always"}, "", 0, true},
	} {
		pol, err := newDefragPolicy(tc.spec)
		if (err != nil) != tc.err {
			t.Fatalf("%+v: err %v", tc.spec, err)
		}
		if err == nil && (pol.mode != tc.mode || pol.maxMoves != tc.maxMoves ||
			pol.maxEvictions != slicerv1alpha1.DefaultMaxEvictions || pol.windowSeconds != slicerv1alpha1.DefaultEvictionWindowSeconds) {
			t.Fatalf("%+v: got %+v", tc.spec, pol)
		}
	}
}

// allocateAs is allocate with the pod UID of a real pod object.
func (o overlayPod) allocateAs(t *testing.T, p *Plugin, uid types.UID) {
	t.Helper()
	for _, s := range o.snapshotSlots(t) {
		p.cache.SetAllocation(&snapshot.Allocation{Namespace: "ns", Name: fmt.Sprintf("%s-%d", o.name, s.Index),
			PodName: o.name, PodUID: uid, NodeName: "n1", Slot: s})
	}
}

// snapshotHandle is a framework handle with the scheduler's snapshot of a cycle.
type snapshotHandle struct {
	fwk.Handle
	snap fwk.SharedLister
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.snap }

// nodeLister is the scheduler's node informer holding nodes.
func nodeLister(t *testing.T, nodes ...*corev1.Node) corelisters.NodeLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(idx)
}

// recommend is the policy of the tests of the planner's answers, which evict nothing (the
// API's default is Evict; its tests are defrag_evict_test.go's and the integration specs').
var recommend = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationRecommend}

// withDefrag gives the test plugin a policy (spec; nil: recommend), a recorder, listers holding
// pods, PDBs and the namespace "ns" with nsLabels, and a node informer holding node n1.
func withDefrag(t *testing.T, p *Plugin, spec *slicerv1alpha1.DefragmentationSpec, rec events.EventRecorder,
	pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget, nsLabels map[string]string) {
	t.Helper()
	if spec == nil {
		spec = recommend
	}
	pol, err := newDefragPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	podIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pod := range pods {
		if err := podIdx.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	pdbIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, pdb := range pdbs {
		if err := pdbIdx.Add(pdb); err != nil {
			t.Fatal(err)
		}
	}
	nsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nsIdx.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: nsLabels}}); err != nil {
		t.Fatal(err)
	}
	setDefragPolicy(p, pol)
	p.defrag.recorder, p.defrag.evictor.recorder = rec, rec
	p.defrag.nodes = nodeLister(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	p.pods = corelisters.NewPodLister(podIdx)
	p.defrag.pods, p.defrag.evictor.pods = p.pods, p.pods
	p.defrag.pdbs, p.defrag.namespaces = policylisters.NewPodDisruptionBudgetLister(pdbIdx), corelisters.NewNamespaceLister(nsIdx)
}

// TestDestinationClassIsWhatNodeAdmitsReads: pods of one destination class are admitted by the
// same nodes (the planner asks about one pod of a class for all of them), and pods that differ
// only in what nodeAdmits does not read share a class.
func TestDestinationClassIsWhatNodeAdmitsReads(t *testing.T) {
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "zone-a", Labels: map[string]string{"zone": "a", "rack": "1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "zone-b", Labels: map[string]string{"zone": "b", "rack": "1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "cordoned"}, Spec: corev1.NodeSpec{Unschedulable: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "maintenance"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "draining", Labels: map[string]string{"zone": "a"}}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "drain", Value: "yes", Effect: corev1.TaintEffectNoExecute}}}},
	}
	p := testPlugin(t)
	p.defrag.nodes = nodeLister(t, nodes...)
	m := &movableIndex{d: p.defrag}
	for _, n := range nodes {
		m.nodes = append(m.nodes, &snapshot.Node{Name: n.Name})
	}
	affinity := func(key string, values ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}}}}}
	}
	var pods []*corev1.Pod
	add := func(name string, edit func(*corev1.Pod)) {
		pod := ownedBy("ReplicaSet", replica(name).Obj())
		if edit != nil {
			edit(pod)
		}
		pods = append(pods, pod)
	}
	for _, prefix := range []string{"x", "y"} { // each spec twice, under other names and labels
		add(prefix+"-free", func(p *corev1.Pod) { p.Labels = map[string]string{"copy": prefix} })
		add(prefix+"-zone-a", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} })
		add(prefix+"-zone-a-rack", func(p *corev1.Pod) {
			// map order varies between runs; the class must not
			p.Spec.NodeSelector = map[string]string{"rack": "1", "zone": "a"}
		})
		add(prefix+"-affinity-b", func(p *corev1.Pod) { p.Spec.Affinity = affinity("zone", "b") })
		add(prefix+"-affinity-ab", func(p *corev1.Pod) { p.Spec.Affinity = affinity("zone", "a", "b") })
		add(prefix+"-pod-affinity-only", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}} // not read by nodeAdmits
		})
		add(prefix+"-tolerates-cordon", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}}
		})
		add(prefix+"-tolerates-maintenance", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}
		})
		add(prefix+"-tolerates-drain", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "drain", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoExecute}}
			p.Spec.NodeSelector = map[string]string{"zone": "a"}
		})
	}
	admits := func(pod *corev1.Pod) string {
		aff := nodeaffinity.GetRequiredNodeAffinity(pod)
		out := ""
		for n := range nodes {
			out += map[bool]string{true: "1", false: "0"}[m.nodeAdmits(pod, aff, n)]
		}
		return out
	}
	classes := map[string]string{} // class -> admitted nodes
	distinct := map[string]bool{}
	for _, pod := range pods {
		c := destinationClassOf(pod)
		if c == "" {
			t.Fatalf("pod %s: no class", pod.Name)
		}
		got := admits(pod)
		if want, ok := classes[c]; ok && want != got {
			t.Errorf("pod %s: class %s admitted by %s, another pod of the class by %s", pod.Name, c, got, want)
		}
		classes[c] = got
		distinct[got] = true
	}
	// Pods x-free and x-pod-affinity-only share a class, and each spec's two copies do: 8
	// classes for 18 pods, one per distinct set of admitting nodes but the two zone-a specs.
	if len(classes) != 8 || len(distinct) != 7 {
		t.Errorf("%d classes over %d distinct admissions, want 8 over 7: %v", len(classes), len(distinct), classes)
	}
}
