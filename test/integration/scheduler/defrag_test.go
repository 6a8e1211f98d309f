package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// nodeLabel names each node of the defragmentation specs; a pod whose nodeSelector asks for it
// is pinned to that node, and so never moved elsewhere.
const nodeLabel = "it.slicer.dev/node"

// cordon sets the node's spec.unschedulable.
func cordon(name string, on bool) {
	GinkgoHelper()
	Eventually(func() error {
		var n corev1.Node
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		n.Spec.Unschedulable = on
		return k8s.Update(ctx, &n)
	}).Should(Succeed())
}

// cordonSeen cordons the node (on) or uncordons it, and waits until the scheduler itself has
// seen it. For a cordon, a probe pod with no slices, pinned to the node, must be refused as
// unschedulable: a pod created after that cannot be placed there by a scheduler that has not
// yet seen the cordon (on a loaded machine its informer may lag the write). A probe placed
// before the cordon was seen holds nothing (no slices) and is deleted; the next probe tries
// again. For an uncordon, a probe must be placed there: a plan made after that counts the node
// as a destination (one made earlier, with the node still cordoned in the scheduler's view,
// may find none and wait minutes for its retry).
func (s *scenario) cordonSeen(node string, on bool) {
	GinkgoHelper()
	cordon(node, on)
	for i := 0; ; i++ {
		Expect(i).To(BeNumerically("<", 20), "the scheduler never saw node %s with unschedulable=%v", node, on)
		probe := s.pod(fmt.Sprintf("cordon-probe-%d-%d", time.Now().UnixNano(), i), nil)
		probe.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
		}}}
		s.create(probe)
		var got *corev1.Pod
		Eventually(func() bool {
			got = s.get(probe.Name)
			if !on {
				// Refused while the scheduler still sees the cordon, the probe is retried when
				// it sees the node change.
				return got.Spec.NodeName != ""
			}
			c := podCondition(got, corev1.PodScheduled)
			return got.Spec.NodeName != "" || c != nil && c.Status == corev1.ConditionFalse
		}, 30*time.Second).Should(BeTrue(), "probe %s neither placed nor refused", probe.Name)
		Expect(k8s.Delete(ctx, got, client.GracePeriodSeconds(0))).To(Succeed())
		if (got.Spec.NodeName == "") == on {
			return
		}
	}
}

// createWebReplicaSet creates the ReplicaSet "web" (replicas labelled app=web) in ns and returns
// the controller reference its replicas carry; the test creates the replicas itself.
func createWebReplicaSet(ns string, replicas int32) metav1.OwnerReference {
	GinkgoHelper()
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}
	Expect(k8s.Create(ctx, rs)).To(Succeed())
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

var _ = Describe("Defragmentation", func() {
	var (
		s    *scenario
		r    *running
		cnt  int
		stop context.CancelFunc
	)
	BeforeEach(func() {
		cnt++
		s = newScenario(fmt.Sprintf("defrag-%d", cnt))
	})
	AfterEach(func() {
		if r != nil {
			DeferCleanup(r.stop)
			r = nil
		}
		if stop != nil {
			DeferCleanup(stop)
			stop = nil
		}
		checkInvariants()
		s.cleanup()
		checkInvariants()
	})

	// twoBlockedGPUs makes two nodes of one H100 each and puts one 1g.10gb replica of a
	// ReplicaSet on each (owned: movable unless annotated), so that a 7g.80gb fits neither. The
	// replicas are spread by cordoning the other node while each is placed; those in pin (1, 2)
	// also have a nodeSelector for their node.
	var rsRef metav1.OwnerReference
	// createWeb creates the ReplicaSet "web" (two replicas labelled app=web) that owns the
	// movable 1g.10gb replicas, and sets rsRef to it. The test creates the replicas itself.
	createWeb := func() {
		GinkgoHelper()
		rsRef = createWebReplicaSet(s.ns, 2)
	}
	twoBlockedGPUs := func(annotate map[string]string, pin ...int) {
		GinkgoHelper()
		createWeb()
		for i := 1; i <= 2; i++ {
			name := fmt.Sprintf("%s-n%d", s.ns, i)
			Expect(framework.CreateNode(ctx, k8s, builder.Node(name).Label(poolLabel, s.pool).Label(nodeLabel, name).Ready().Obj())).To(Succeed())
			Expect(framework.CreateNodeAccelerator(ctx, k8s, framework.MakeNodeAccelerator(name).GPUs("H100-80GB", 1).Obj())).To(Succeed())
			s.nodes = append(s.nodes, name)
			if i == 2 {
				s.cordonSeen(s.nodes[0], true)
			}
			p := s.pod(fmt.Sprintf("web-%d", i), map[string]int64{"1g.10gb": 1})
			if slices.Contains(pin, i) {
				p.Spec.NodeSelector[nodeLabel] = name
			}
			p.Labels = map[string]string{"app": "web"}
			p.Annotations = annotate
			p.OwnerReferences = []metav1.OwnerReference{rsRef}
			s.create(p)
			Eventually(func() string { return s.get(p.Name).Spec.NodeName }).Should(Equal(name))
		}
		s.cordonSeen(s.nodes[0], false)
	}
	eventsOf := func(pod *corev1.Pod, reason string) []string {
		var list corev1.EventList
		Expect(k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.UID == pod.UID && e.Reason == reason {
				out = append(out, e.Message)
			}
		}
		return out
	}
	plans := func(pod *corev1.Pod) []string { return eventsOf(pod, slicerv1alpha1.EventDefragmentationPlanned) }
	// webLeft lists the replicas not evicted: bound, not terminating.
	webLeft := func() []string {
		var out []string
		for _, p := range s.pods() {
			if strings.HasPrefix(p.Name, "web-") && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	evictMode := func(o *config.Options) {
		o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
	}
	// startRecommend starts a scheduler that plans and evicts nothing (Evict is the default).
	startRecommend := func() {
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationRecommend}
		})
	}
	startEvict := func(opts plugin.Options) {
		r = startSchedulerWith(ctx, opts, timeout, evictMode)
		var c context.Context
		c, stop = context.WithCancel(ctx)
		fakeKubelet(c, s.ns, 0, 0)
	}
	// replacement plays the ReplicaSet for a moved pod of profile: a new pod of the same owner,
	// placed by the scheduler.
	replacement := func(name, profile string) *corev1.Pod {
		p := s.pod(name, map[string]int64{profile: 1})
		p.Labels = map[string]string{"app": "web"}
		p.OwnerReferences = []metav1.OwnerReference{rsRef}
		return s.create(p)
	}

	It("names the one move that opens a placement, on the pod's Event and reason, and evicts nothing", func() {
		startRecommend()
		twoBlockedGPUs(nil)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() []string { return plans(big) }, 30*time.Second).Should(ContainElement(
			MatchRegexp(`^1 move\(s\): move pod %s/web-[12] \(1g\.10gb\) from node %s-n[12] GPU 0 @\d to node %s-n[12] GPU 0 @\d; then 7g\.80gb fits on node %s-n[12] GPU 0 @0$`,
				s.ns, s.ns, s.ns, s.ns)))
		Eventually(func() string { return unschedulable(s.get(big.Name)) }).Should(ContainSubstring("defragmentation (Recommend, nothing evicted): 1 move(s)"))
		Consistently(func() []string { return webLeft() }, 2*time.Second).Should(HaveLen(2), "Recommend evicts nothing")
		Expect(s.get(big.Name).Spec.NodeName).To(BeEmpty())
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragPlans.WithLabelValues("Planned"))).To(BeNumerically(">=", 1))
	})

	It("plans nothing for pods annotated slicer.dev/movable: \"false\", and says so", func() {
		startRecommend()
		twoBlockedGPUs(map[string]string{slicerv1alpha1.AnnotationMovable: "false"})
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(
			ContainSubstring(fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)))
		Expect(plans(big)).To(BeEmpty())
	})

	It("does not move a replica whose nodeSelector pins it to its node: the plan moves the other one", func() {
		startRecommend()
		twoBlockedGPUs(nil, 1)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() []string { return plans(big) }, 30*time.Second).Should(ContainElement(
			MatchRegexp(`^1 move\(s\): move pod %s/web-2 \(1g\.10gb\) from node %s-n2 GPU 0 @\d to node %s-n1 GPU 0 @\d; then 7g\.80gb fits on node %s-n2 GPU 0 @0$`,
				s.ns, s.ns, s.ns, s.ns)))
		Expect(plans(big)).NotTo(ContainElement(ContainSubstring("web-1")))
	})

	It("plans nothing when every blocking replica is pinned to its node, and says so", func() {
		startRecommend()
		twoBlockedGPUs(nil, 1, 2)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(
			ContainSubstring(fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)))
		Expect(plans(big)).To(BeEmpty())
	})

	It("plans again once a node is uncordoned, though an answer without a plan is kept for the same request", func() {
		startRecommend()
		twoBlockedGPUs(nil)
		// Both nodes cordoned: neither replica has anywhere to go.
		s.cordonSeen(s.nodes[0], true)
		s.cordonSeen(s.nodes[1], true)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(
			ContainSubstring(fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)))
		By("uncordoning the second node, which the scheduler's node informer counts as a change of the planner's inputs")
		s.cordonSeen(s.nodes[1], false)
		// A pod created now is planned for afresh: the kept NoPlan is of an older generation.
		// (An attempt in the moment between the informer storing the uncordon and its handler
		// counting it gets the answer of the state before, as an attempt a moment earlier
		// would: the next pod tries again.)
		want := fmt.Sprintf("defragmentation (Recommend, nothing evicted): 1 move(s): move pod %s/web-1 (1g.10gb) from node %s-n1 GPU 0", s.ns, s.ns)
		Eventually(func(g Gomega) {
			p := s.create(s.pod(fmt.Sprintf("big-%d", time.Now().UnixNano()), map[string]int64{"7g.80gb": 1}))
			g.Eventually(func() string { return unschedulable(s.get(p.Name)) }, 10*time.Second).Should(ContainSubstring("defragmentation"))
			g.Expect(unschedulable(s.get(p.Name))).To(ContainSubstring(want))
		}, 45*time.Second, time.Second).Should(Succeed())
	})

	It("looks for no plan when disabled", func() {
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationDisabled}
		})
		twoBlockedGPUs(nil)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(ContainSubstring("no GPU has a free slot"))
		Consistently(func() string { return unschedulable(s.get(big.Name)) }, 2*time.Second).ShouldNot(ContainSubstring("defragmentation"))
		Expect(plans(big)).To(BeEmpty())
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragPlans.WithLabelValues("Planned"))).To(BeZero())
	})

	It("carries a plan out in Evict mode: one replica evicted, its replacement on the room held for it, the pod on the room opened", func() {
		startEvict(plugin.Options{})
		twoBlockedGPUs(nil)
		// n2 full but for one 1g.10gb room (web-2 is at 6): the plan can move web-1 only there,
		// and a pod created before web-1's replacement would take that room if it were not held.
		s.cordonSeen(s.nodes[0], true)
		s.create(s.pod("fill", map[string]int64{"4g.40gb": 1, "1g.10gb": 1}))
		Eventually(func() string { return s.get("fill").Spec.NodeName }).Should(Equal(s.nodes[1]))
		s.cordonSeen(s.nodes[0], false)
		before := map[string]string{} // replica -> node
		for _, p := range s.pods() {
			before[p.Name] = p.Spec.NodeName
		}
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(webLeft, 30*time.Second).Should(HaveLen(1), "exactly one replica is evicted")
		left := webLeft()[0]
		Expect(left).To(Equal("web-2"), "web-1 moves to n2's one free room")
		Expect(eventsOf(big, plugin.EventDefragmentationEvicting)).To(ContainElement(ContainSubstring("evicted 1 pod(s): 1 move(s)")))
		By("a pod created before the replacement is kept off the room held for it")
		rival := s.create(s.pod("rival", map[string]int64{"1g.10gb": 1}))
		Eventually(func() string { return unschedulable(s.get(rival.Name)) + s.get(rival.Name).Spec.NodeName }, 30*time.Second).ShouldNot(BeEmpty())
		Consistently(func() string { return s.get(rival.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"the room held for web-1's replacement went to another pod")
		By("the replacement goes to the room held for it, on the other replica's node")
		repl := replacement("web-3", "1g.10gb")
		Eventually(func() string { return s.get(repl.Name).Spec.NodeName }, 30*time.Second).Should(Equal(before[left]))
		By("the pending pod lands on the node the evicted replica left")
		Eventually(func() string { return s.get(big.Name).Spec.NodeName }, 30*time.Second).ShouldNot(BeEmpty())
		Expect(s.get(big.Name).Spec.NodeName).NotTo(Equal(before[left]))
		Expect(s.allocationsOf(s.get(big.Name))).To(HaveLen(1))
		Expect(s.allocationsOf(s.get(big.Name))[0].Spec.Placement.Start).To(BeEquivalentTo(0))
		Expect(webLeft()).To(ConsistOf(left, "web-3"))
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
	})

	It("empties a GPU for a whole-GPU pod by moving its one replica in Evict mode: the replacement on the room held, the pod on the emptied GPU whole", func() {
		// Two nodes of one H100 each, both switchable (policy Dynamic): web-1 (movable) on n1;
		// on n2 a bare pod (never moved) leaves room for one 1g.10gb. A whole-GPU pod of the same
		// priority preempts nothing; the plan moves web-1 to n2 and takes n1's GPU whole.
		startEvict(plugin.Options{})
		createWeb()
		for i := 1; i <= 2; i++ {
			name := fmt.Sprintf("%s-n%d", s.ns, i)
			Expect(framework.CreateNode(ctx, k8s, builder.Node(name).Label(poolLabel, s.pool).Label(nodeLabel, name).Ready().Obj())).To(Succeed())
			na := framework.MakeNodeAccelerator(name).GPUs("H100-80GB", 1).Obj()
			na.Status.GPUs[0].ModePolicy = slicerv1alpha1.GPUModePolicyDynamic
			Expect(framework.CreateNodeAccelerator(ctx, k8s, na)).To(Succeed())
			s.nodes = append(s.nodes, name)
		}
		s.cordonSeen(s.nodes[1], true)
		web := s.pod("web-1", map[string]int64{"1g.10gb": 1})
		web.Labels = map[string]string{"app": "web"}
		web.OwnerReferences = []metav1.OwnerReference{rsRef}
		s.create(web)
		Eventually(func() string { return s.get("web-1").Spec.NodeName }).Should(Equal(s.nodes[0]))
		s.cordonSeen(s.nodes[1], false)
		s.cordonSeen(s.nodes[0], true)
		s.create(s.pod("fill", map[string]int64{"4g.40gb": 1, "2g.20gb": 1}))
		Eventually(func() string { return s.get("fill").Spec.NodeName }).Should(Equal(s.nodes[1]))
		s.cordonSeen(s.nodes[0], false)

		whole := s.create(builder.Pod(s.ns, "whole").Scheduler(config.DefaultSchedulerName).NodeSelector(poolLabel, s.pool).
			Container("c", builder.Both("nvidia.com/gpu", "1")).Obj())
		Eventually(webLeft, 30*time.Second).Should(BeEmpty(), "web-1 is evicted")
		Expect(eventsOf(whole, plugin.EventDefragmentationEvicting)).To(ContainElement(MatchRegexp(`evicted 1 pod\(s\): 1 move\(s\): .*then GPU\(s\) 0 of node %s are empty for 1 whole GPU`, s.nodes[0])))
		By("a slice pod created before the replacement is kept off the room held for it")
		rival := s.create(s.pod("rival", map[string]int64{"1g.10gb": 1}))
		Consistently(func() string { return s.get(rival.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"the room held for web-1's replacement, or the GPU emptied, went to another pod")
		By("the replacement goes to the room held for it on n2; the whole-GPU pod takes n1's GPU")
		repl := replacement("web-2", "1g.10gb")
		Eventually(func() string { return s.get(repl.Name).Spec.NodeName }, 30*time.Second).Should(Equal(s.nodes[1]))
		Eventually(func() string { return s.get(whole.Name).Spec.NodeName }, 30*time.Second).Should(Equal(s.nodes[0]))
		allocs := s.allocationsOf(s.get(whole.Name))
		Expect(allocs).To(HaveLen(1))
		Expect(allocs[0].Spec.WholeGPU).To(BeTrue())
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
	})

	It("evicts no more than maxEvictions per window in Evict mode: the next plan waits for the cap", func() {
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict, MaxEvictions: 1, MaxMovesPerPlan: 1}
		})
		var c context.Context
		c, stop = context.WithCancel(ctx)
		fakeKubelet(c, s.ns, 0, 0)
		rsRef = createWebReplicaSet(s.ns, 3)
		// Three nodes of one H100, each blocked for a 7g.80gb by one replica.
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("%s-n%d", s.ns, i)
			s.addNode(name, 1)
			for _, other := range s.nodes[:i-1] {
				s.cordonSeen(other, true)
			}
			replacement(fmt.Sprintf("web-%d", i), "1g.10gb")
			Eventually(func() string { return s.get(fmt.Sprintf("web-%d", i)).Spec.NodeName }).Should(Equal(name))
		}
		for _, n := range s.nodes[:2] {
			s.cordonSeen(n, false)
		}
		By("the first plan's one eviction is the window's cap")
		big1 := s.create(s.pod("big-1", map[string]int64{"7g.80gb": 1}))
		Eventually(webLeft, 30*time.Second).Should(HaveLen(2))
		replacement("web-4", "1g.10gb")
		Eventually(func() string { return s.get(big1.Name).Spec.NodeName }, 30*time.Second).ShouldNot(BeEmpty())
		Eventually(webLeft, 30*time.Second).Should(HaveLen(3))
		By("the second plan, one move too, waits for the cap and evicts nothing")
		big2 := s.create(s.pod("big-2", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(big2.Name)) }, 30*time.Second).Should(
			ContainSubstring("defragmentation (Evict) waits: the plan's 1 eviction(s) would pass the cap of 1 per 1h0m0s"))
		Consistently(webLeft, 3*time.Second).Should(HaveLen(3), "no replica is evicted past the cap")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragRefused.WithLabelValues(plugin.DefragRefusedEvictionCap))).To(BeNumerically(">=", 1))
	})

	// The Eviction API enforces a PodDisruptionBudget on running pods only (and lets an unready
	// one go while the budget's healthy pods suffice); the fake kubelet leaves pod status alone.
	markRunning := func(name string) {
		GinkgoHelper()
		p := s.get(name)
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
		Expect(k8s.Status().Update(ctx, p)).To(Succeed())
	}
	// staleBudget is a PodDisruptionBudget over the pods with the labels whose status, as the
	// scheduler's informer reads it, allows one disruption, but whose controller has not caught
	// up with its spec (observedGeneration behind): the Eviction API refuses with 429, as it does
	// when a budget changes between the plan and the eviction.
	staleBudget := func(name string, match map[string]string) {
		GinkgoHelper()
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: match}}}
		Expect(k8s.Create(ctx, pdb)).To(Succeed())
		pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2, ObservedGeneration: 0}
		Expect(k8s.Status().Update(ctx, pdb)).To(Succeed())
		Eventually(func() int32 {
			var got policyv1.PodDisruptionBudget
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pdb), &got)).To(Succeed())
			return got.Status.DisruptionsAllowed
		}).Should(BeEquivalentTo(1))
	}
	// story says, for a failure, what the pending pod was told.
	story := func(pod *corev1.Pod) func() string {
		return func() string {
			var list corev1.EventList
			Expect(k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
			var evs []string
			for _, e := range list.Items {
				if e.InvolvedObject.UID == pod.UID {
					evs = append(evs, e.Reason+": "+e.Message)
				}
			}
			return fmt.Sprintf("reason %q; events %q; replicas left %v", unschedulable(s.get(pod.Name)), evs, webLeft())
		}
	}
	refused := func() float64 {
		return testutil.ToFloat64(r.plugin.Metrics().DefragRefused.WithLabelValues(plugin.DefragRefusedEviction))
	}
	noRoomHeld := func() {
		GinkgoHelper()
		for _, n := range s.nodes {
			for gpu, holders := range r.plugin.Cache().Holders(n) {
				Expect(holders).NotTo(ContainElement(ContainSubstring("replacement of")), "room still held on %s %s", n, gpu)
			}
		}
	}

	It("abandons a plan whose one eviction a PodDisruptionBudget refuses: rooms released, nothing evicted, the pod told", func() {
		startEvict(plugin.Options{})
		twoBlockedGPUs(nil)
		markRunning("web-1")
		markRunning("web-2")
		staleBudget("web", map[string]string{"app": "web"})
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() []string { return eventsOf(big, plugin.EventDefragmentationAbandoned) }, 30*time.Second).Should(ContainElement(
			MatchRegexp(`^plan abandoned before any eviction: the eviction of pod %s/web-[12] was refused: .*disruption budget`, s.ns)), story(big))
		// First told "plan abandoned, ..."; the cycles after, while the backoff lasts, "the last
		// plan was abandoned (...)".
		Eventually(func() string { return unschedulable(s.get(big.Name)) }).Should(
			MatchRegexp(`defragmentation \(Evict\): (plan abandoned, |the last plan was abandoned \()the eviction of pod %s/web-[12] was refused`, s.ns))
		Expect(refused()).To(BeNumerically(">=", 1))
		first := refused()
		Consistently(webLeft, 3*time.Second).Should(HaveLen(2), "nothing is evicted")
		Expect(refused()-first).To(BeNumerically("<=", 1), "a refused plan is not retried at once, over and over")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(BeZero())
		noRoomHeld()
		got := s.get(big.Name)
		Expect(got.Spec.NodeName).To(BeEmpty())
		Expect(got.Status.NominatedNodeName).To(BeEmpty())
	})

	It("abandons a two-move plan whose second eviction a PodDisruptionBudget refuses: the first replacement keeps its room, nothing else evicted", func() {
		startEvict(plugin.Options{})
		a, b := s.ns+"-a", s.ns+"-b"
		// Node a gets the two 1g.10gb replicas; node b a bare 4g.40gb, so that the 7g.80gb fits
		// on a only, once both replicas have moved to b.
		s.addNode(a, 1)
		createWeb()
		for i := 1; i <= 2; i++ {
			p := s.pod(fmt.Sprintf("web-%d", i), map[string]int64{"1g.10gb": 1})
			p.Labels = map[string]string{"app": "web"}
			p.OwnerReferences = []metav1.OwnerReference{rsRef}
			s.create(p)
		}
		Eventually(s.bound).Should(Equal(2))
		s.addNode(b, 1)
		s.cordonSeen(a, true)
		s.create(s.pod("four", map[string]int64{"4g.40gb": 1}))
		Eventually(func() string { return s.get("four").Spec.NodeName }).Should(Equal(b))
		s.cordonSeen(a, false)
		// The plan evicts in the order of the replicas' placements: the budget guards the later.
		start := func(name string) int32 { return s.allocationsOf(s.get(name))[0].Spec.Placement.Start }
		second := "web-2"
		if start("web-1") > start("web-2") {
			second = "web-1"
		}
		staleBudget("guard", map[string]string{"guard": "yes"})
		g := s.get(second)
		g.Labels["guard"] = "yes"
		Expect(k8s.Update(ctx, g)).To(Succeed())
		markRunning(second)

		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() []string { return eventsOf(big, plugin.EventDefragmentationAbandoned) }, 30*time.Second).Should(ContainElement(
			MatchRegexp(`^plan abandoned after 1 eviction\(s\): the eviction of pod %s/%s was refused: .*disruption budget.*; the evicted pods' replacements keep their rooms$`, s.ns, second)), story(big))
		Eventually(webLeft).Should(ConsistOf(second), "the first replica is evicted")
		Expect(refused()).To(BeNumerically(">=", 1))
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
		By("the room held for the evicted replica's replacement stays, and takes it")
		repl := replacement("web-3", "1g.10gb")
		Eventually(func() string { return s.get(repl.Name).Spec.NodeName }, 30*time.Second).Should(Equal(b))
		noRoomHeld()
		By("nothing else is evicted, and the pending pod is not placed")
		Consistently(webLeft, 3*time.Second).Should(ConsistOf(second, "web-3"))
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
		got := s.get(big.Name)
		Expect(got.Spec.NodeName).To(BeEmpty())
		Expect(got.Status.NominatedNodeName).To(BeEmpty())
	})

	It("abandons the held room when no replacement comes, with nothing else evicted", func() {
		startEvict(plugin.Options{DefragReplacementTimeout: 3 * time.Second})
		twoBlockedGPUs(nil)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(webLeft, 30*time.Second).Should(HaveLen(1))
		Eventually(func() string { return s.get(big.Name).Spec.NodeName }, 30*time.Second).ShouldNot(BeEmpty())
		By("after the timeout the room held for the replacement is released and the pod is told")
		// The sweep runs when the scheduler next looks at a MIG pod.
		Eventually(func() []string {
			s.create(s.pod(fmt.Sprintf("probe-%d", time.Now().UnixNano()), map[string]int64{"1g.10gb": 1}))
			return eventsOf(big, plugin.EventDefragmentationAbandoned)
		}, 30*time.Second, 2*time.Second).Should(ContainElement(ContainSubstring("no replacement of")))
		// The probes are placed (the room released included); let the last be bound before the
		// invariants are read.
		Eventually(func() []string {
			var waiting []string
			for _, p := range s.pods() {
				if strings.HasPrefix(p.Name, "probe-") && (p.Spec.NodeName == "" || len(s.allocationsOf(&p)) == 0) {
					waiting = append(waiting, p.Name)
				}
			}
			return waiting
		}, 30*time.Second).Should(BeEmpty())
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragRefused.WithLabelValues(plugin.DefragRefusedReplacementLate))).To(Equal(1.0))
		for _, n := range s.nodes {
			for gpu, holders := range r.plugin.Cache().Holders(n) {
				Expect(holders).NotTo(ContainElement(ContainSubstring("replacement of")), "room still held on %s %s", n, gpu)
			}
		}
		Expect(webLeft()).To(HaveLen(1), "nothing else was evicted")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
	})

	// placedAt binds a 1-slice pod to node with its allocation at GPU gpu, start (as the
	// scheduler's PreBind would have left it), owned by the ReplicaSet "web" when owned.
	placedAt := func(node, name, profile string, gpu, start int, owned bool) *corev1.Pod {
		GinkgoHelper()
		if !owned {
			return placeAt(s, s.ns, node, name, profile, gpu, start, nil, "", nil)
		}
		return placeAt(s, s.ns, node, name, profile, gpu, start, map[string]string{"app": "web"}, "",
			func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{rsRef} })
	}
	// placementOf is "GPU index@start" of the pod's one allocation, "" while it has none.
	placementOf := func(name string) string {
		as := s.allocationsOf(s.get(name))
		if len(as) != 1 {
			return ""
		}
		for i := 0; i < 2; i++ {
			if as[0].Spec.GPUUUID == framework.GPUUUID(as[0].Spec.NodeName, i) {
				return fmt.Sprintf("%d@%d", i, as[0].Spec.Placement.Start)
			}
		}
		return "?"
	}

	// repackExample places TestPlanRepackOrderedExample's GPUs on one node: GPU 0 is full of pods
	// that may not move; on GPU 1 the 4g.40gb's memory at 0-3 is held by web-1's 1g.20gb at 2,
	// which has no room free now to go to: 4-5 and 6-7 hold the bare "keep" at 4 and web-2 at
	// 6. No plan of independent moves exists; re-placing GPU 1 moves web-1 into the room web-2
	// leaves at 6 and web-2 to 5 (evicted in that order).
	repackExample := func() {
		GinkgoHelper()
		createWeb()
		node := s.ns + "-n1"
		s.addNode(node, 2)
		placedAt(node, "full-a", "4g.40gb", 0, 0, false)
		placedAt(node, "full-b", "3g.40gb", 0, 4, false)
		placedAt(node, "web-1", "1g.20gb", 1, 2, true)
		placedAt(node, "keep", "1g.10gb", 1, 4, false)
		placedAt(node, "web-2", "1g.10gb", 1, 6, true)
		Eventually(func() int { return holders(r, node) }).Should(Equal(5))
	}

	It("carries a repack plan out in Evict mode: a replica moves into the room another one leaves, the pod lands where planned", func() {
		startEvict(plugin.Options{})
		repackExample()
		big := s.create(s.pod("big", map[string]int64{"4g.40gb": 1}))
		Eventually(webLeft, 30*time.Second).Should(BeEmpty(), "both replicas are evicted")
		Expect(eventsOf(big, plugin.EventDefragmentationEvicting)).To(ContainElement(ContainSubstring("evicted 2 pod(s): 2 move(s), some into room the others leave")))
		By("the replacements go to the rooms held for them, the one into the room the other's predecessor left")
		repl20 := replacement("web-3", "1g.20gb")
		repl10 := replacement("web-4", "1g.10gb")
		Eventually(func() string { return placementOf(repl20.Name) }, 30*time.Second).Should(Equal("1@6"))
		Eventually(func() string { return placementOf(repl10.Name) }, 30*time.Second).Should(Equal("1@5"))
		By("the pending pod lands on the placement opened for it")
		Eventually(func() string { return placementOf(big.Name) }, 30*time.Second).Should(Equal("1@0"))
		for name, at := range map[string]string{"full-a": "0@0", "full-b": "0@4", "keep": "1@4"} {
			Expect(placementOf(name)).To(Equal(at), "%s did not move", name)
		}
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(2.0))
		noRoomHeld()
	})

	It("abandons a repack plan whose second eviction a budget refuses: the room deferred for the first replacement is dropped, not waited for", func() {
		startEvict(plugin.Options{})
		repackExample()
		staleBudget("guard", map[string]string{"guard": "yes"})
		g := s.get("web-2")
		g.Labels["guard"] = "yes"
		Expect(k8s.Update(ctx, g)).To(Succeed())
		markRunning("web-2")
		big := s.create(s.pod("big", map[string]int64{"4g.40gb": 1}))
		Eventually(func() []string { return eventsOf(big, plugin.EventDefragmentationAbandoned) }, 30*time.Second).Should(ContainElement(
			ContainSubstring("plan abandoned after 1 eviction(s): the eviction of pod "+s.ns+"/web-2 was refused")), story(big))
		Eventually(webLeft).Should(ConsistOf("web-2"), "web-1 is evicted")
		By("web-1's move alone opened the 4g.40gb's placement: the pod lands there")
		Eventually(func() string { return placementOf(big.Name) }, 30*time.Second).Should(Equal("1@0"))
		By("web-1's replacement is not held waiting for the room at 6 that web-2 keeps")
		repl := replacement("web-3", "1g.20gb")
		Eventually(func() string { return unschedulable(s.get(repl.Name)) }, 30*time.Second).ShouldNot(BeEmpty())
		Consistently(func() string { return unschedulable(s.get(repl.Name)) }, 3*time.Second).ShouldNot(ContainSubstring("defragmentation holds room"))
		Expect(placementOf(repl.Name)).To(BeEmpty(), "no room is left for a 1g.20gb")
		noRoomHeld()
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(Equal(1.0))
		Expect(webLeft()).To(ConsistOf("web-2"))
	})
})
