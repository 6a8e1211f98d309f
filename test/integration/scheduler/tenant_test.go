package scheduler_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/framework"
)

// editor is a client for a tenant: the user, bound to the built-in edit ClusterRole in ns only,
// through impersonation (as a namespace editor reaches the apiserver on a shared cluster).
func editor(ns, user string) client.Client {
	GinkgoHelper()
	aggregateEdit()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, rb))).To(Succeed())
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	// The apiserver's RBAC authorizer learns of the binding through its informer.
	Eventually(func() error {
		return c.List(ctx, &corev1.PodList{}, client.InNamespace(ns))
	}).Should(Succeed())
	return c
}

// sharedCluster is the restart spec's cluster shared by two tenants: tenant b's ReplicaSet
// "web" has its one replica web-1 on n1, which blocks a 7g.80gb there; n2 is full but for
// 1g.10gb @6 (a bare pod of the scenario's own namespace, tenant a's). It returns tenant b's
// namespace and the ReplicaSet's controller reference.
func sharedCluster(s *scenario) (string, metav1.OwnerReference) {
	GinkgoHelper()
	nsB := otherTenant(s, 0)
	kctx, stopKubelet := context.WithCancel(ctx)
	DeferCleanup(stopKubelet)
	fakeKubelet(kctx, s.ns, 0, 0)
	rsRef := createWebReplicaSet(nsB, 1)
	s.addNode(s.ns+"-n1", 1)
	s.addNode(s.ns+"-n2", 1)
	n1, n2 := s.nodes[0], s.nodes[1]
	s.cordonSeen(n1, true)
	s.create(s.pod("fill", map[string]int64{"4g.40gb": 1, "2g.20gb": 1}))
	boundTo(s.ns, "fill", n2)
	s.cordonSeen(n1, false)
	s.cordonSeen(n2, true)
	Expect(k8s.Create(ctx, replicaIn(s, nsB, "web-1", rsRef))).To(Succeed())
	boundTo(nsB, "web-1", n1)
	s.cordonSeen(n2, false)
	return nsB, rsRef
}

// otherTenant creates the namespace of a second tenant of the scenario ("<ns>-b"), cleaned up
// with it, whose terminating pods a fake kubelet finishes after delay.
func otherTenant(s *scenario, delay time.Duration) string {
	GinkgoHelper()
	ns := s.ns + "-b"
	Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())
	s.others = append(s.others, ns)
	kctx, stopKubelet := context.WithCancel(ctx)
	DeferCleanup(stopKubelet)
	fakeKubelet(kctx, ns, delay, 0)
	return ns
}

// boundTo waits until the pod is bound to node.
func boundTo(ns, name, node string) {
	GinkgoHelper()
	Eventually(func() string {
		var p corev1.Pod
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
		return p.Spec.NodeName
	}, 30*time.Second).Should(Equal(node))
}

// twoTenants is sharedCluster with tenant a's editor asking for a 7g.80gb: the plan (Evict) moves
// web-1 to n2 @6 and holds that room for its replacement. It returns what sharedCluster does,
// the editor's client and the pending pod, once web-1 is evicted and gone.
func twoTenants(s *scenario) (string, metav1.OwnerReference, client.Client, *corev1.Pod) {
	GinkgoHelper()
	nsB, rsRef := sharedCluster(s)
	tenantA := editor(s.ns, "alice")
	big := s.pod("big", map[string]int64{"7g.80gb": 1})
	Expect(tenantA.Create(ctx, big)).To(Succeed())
	Eventually(func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-1"}, &corev1.Pod{})
	}, 30*time.Second).Should(MatchError(ContainSubstring("not found")), "web-1 evicted and gone")
	return nsB, rsRef, tenantA, big
}

// runningIn marks the pod Running and Ready, as a kubelet would (the Eviction API enforces a
// PodDisruptionBudget on running pods only; there is no kubelet here).
func runningIn(ns, name string) {
	GinkgoHelper()
	var p corev1.Pod
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	Expect(k8s.Status().Update(ctx, &p)).To(Succeed())
}

// tenantBudget has tenant ns's editor create a PodDisruptionBudget over sel (minAvailable 1),
// then plays the disruption controller (envtest has none): its status, processed, allows
// allowed disruptions of expected healthy pods. It waits a moment for the scheduler's informer.
func tenantBudget(tenant client.Client, ns, name string, sel *metav1.LabelSelector, allowed, expected int32) {
	GinkgoHelper()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: sel}}
	Expect(tenant.Create(ctx, pdb)).To(Succeed())
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pdb), pdb)).To(Succeed())
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: expected, DesiredHealthy: expected - allowed, ExpectedPods: expected}
	Expect(k8s.Status().Update(ctx, pdb)).To(Succeed())
	time.Sleep(time.Second) // the scheduler's PodDisruptionBudget informer
}

// replicaIn is a 1g.10gb replica of the ReplicaSet rsRef names, in namespace ns, on the
// scenario's pool.
func replicaIn(s *scenario, ns, name string, rsRef metav1.OwnerReference) *corev1.Pod {
	p := s.pod(name, map[string]int64{"1g.10gb": 1})
	p.Namespace = ns
	p.Labels = map[string]string{"app": "web"}
	p.OwnerReferences = []metav1.OwnerReference{rsRef}
	return p
}

// aggregateEdit does what kube-controller-manager's ClusterRole aggregation controller does and
// envtest has none to do: the bootstrap edit ClusterRole gets the rules of the roles its
// aggregation rule selects (system:aggregate-to-edit, and view with the rules it aggregates).
func aggregateEdit() {
	GinkgoHelper()
	var cr rbacv1.ClusterRole
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "edit"}, &cr)).To(Succeed())
	if len(cr.Rules) > 0 {
		return
	}
	cr.Rules = aggregatedRules(&cr)
	Expect(cr.Rules).NotTo(BeEmpty())
	Expect(k8s.Update(ctx, &cr)).To(Succeed())
}

// aggregatedRules is a ClusterRole's rules as the aggregation controller would make them.
func aggregatedRules(cr *rbacv1.ClusterRole) []rbacv1.PolicyRule {
	GinkgoHelper()
	if cr.AggregationRule == nil {
		return cr.Rules
	}
	var rules []rbacv1.PolicyRule
	for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		Expect(err).NotTo(HaveOccurred())
		var list rbacv1.ClusterRoleList
		Expect(k8s.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector})).To(Succeed())
		for i := range list.Items {
			rules = append(rules, aggregatedRules(&list.Items[i])...)
		}
	}
	return rules
}

var _ = Describe("Defragmentation on a cluster shared by tenants", func() {
	var (
		s *scenario
		r *running
	)
	BeforeEach(func() {
		s = newScenario(fmt.Sprintf("tenant-%d", time.Now().UnixNano()%100000))
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
		})
	})
	AfterEach(func() {
		r.stop()
		checkInvariants()
		s.cleanup()
		checkInvariants()
	})

	It("holds the room of a moved pod for its own replacement, not for another tenant's pod that names its controller", func() {
		nsB, rsRef, tenantA, big := twoTenants(s)
		By("tenant a's editor creates a pod owned, by its owner reference, by tenant b's ReplicaSet")
		thief := s.pod("thief", map[string]int64{"1g.10gb": 1})
		thief.OwnerReferences = []metav1.OwnerReference{rsRef}
		Expect(tenantA.Create(ctx, thief)).To(Succeed())
		tookIt := "the room held for tenant b's replacement went to tenant a's pod"
		Eventually(func() string {
			if p := s.get(thief.Name); p.Spec.NodeName != "" {
				return "bound to " + p.Spec.NodeName
			}
			return unschedulable(s.get(thief.Name))
		}, 30*time.Second).ShouldNot(BeEmpty())
		Expect(s.get(thief.Name).Spec.NodeName).To(BeEmpty(), tookIt)
		Consistently(func() string { return s.get(thief.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(), tookIt)
		By("tenant b's replacement takes the room held for it; the 7g.80gb pod the room opened")
		Expect(k8s.Create(ctx, replicaIn(s, nsB, "web-2", rsRef))).To(Succeed())
		Eventually(func() string {
			var p corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-2"}, &p)).To(Succeed())
			return p.Spec.NodeName
		}, 30*time.Second).Should(Equal(s.nodes[1]))
		Eventually(func() string { return s.get(big.Name).Spec.NodeName }, 30*time.Second).Should(Equal(s.nodes[0]))
		Expect(s.get(thief.Name).Spec.NodeName).To(BeEmpty())
	})

	It("tells a tenant which GPU and how many moves, and never another tenant's pods or UIDs", func() {
		nsB, rsRef, tenantA, big := twoTenants(s)
		var webUID string
		Eventually(func() string {
			var evs corev1.EventList
			Expect(k8s.List(ctx, &evs, client.InNamespace(nsB))).To(Succeed())
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "web-1" {
					webUID = string(e.InvolvedObject.UID)
				}
			}
			return webUID
		}, 30*time.Second).ShouldNot(BeEmpty(), "an Event on web-1 names its UID")
		secrets := []string{nsB, "web-1", string(rsRef.UID), webUID}
		By("tenant a's editor reads its pending pod (its Pending reason and the plan record) and its namespace's Events")
		read := func() string {
			var p corev1.Pod
			Expect(tenantA.Get(ctx, client.ObjectKeyFromObject(big), &p)).To(Succeed())
			var evs corev1.EventList
			Expect(tenantA.List(ctx, &evs, client.InNamespace(s.ns))).To(Succeed())
			text := fmt.Sprintf("%+v", p.Status)
			for _, e := range evs.Items {
				text += "\n" + e.Reason + ": " + e.Message
			}
			return text
		}
		Eventually(read, 30*time.Second).Should(And(
			ContainSubstring(slicerv1alpha1.EventDefragmentationPlanned+": 1 move(s): move a pod of another namespace (1g.10gb) from node "+s.nodes[0]+" GPU 0"),
			ContainSubstring(plugin.EventDefragmentationEvicting+": evicted 1 pod(s)"),
			ContainSubstring(string(slicerv1alpha1.PodConditionDefragmentationPlan))))
		text := read()
		GinkgoWriter.Printf("what tenant a reads:\n%s\n", text)
		for _, secret := range secrets {
			Expect(text).NotTo(ContainSubstring(secret), "tenant a reads tenant b's %q", secret)
		}
	})

	It("tells a preemptor how many pods of other tenants it waits for, not which", func() {
		ensurePriorityClasses()
		nsB := otherTenant(s, 2*time.Second) // the victims terminate after 2 s: the preemptor waits
		s.addNode(s.ns+"-n1", 1)
		var lows []string
		for i := 0; i < 7; i++ {
			p := withPriority(s.pod(fmt.Sprintf("low-%d", i), map[string]int64{"1g.10gb": 1}), prioLow)
			p.Namespace = nsB
			Expect(k8s.Create(ctx, p)).To(Succeed())
			lows = append(lows, p.Name)
		}
		Eventually(func() int {
			var list corev1.PodList
			Expect(k8s.List(ctx, &list, client.InNamespace(nsB))).To(Succeed())
			n := 0
			for _, p := range list.Items {
				if p.Spec.NodeName != "" {
					n++
				}
			}
			return n
		}).Should(Equal(7))
		tenantA := editor(s.ns, "alice")
		high := withPriority(s.pod("high", map[string]int64{"3g.40gb": 1}), prioHigh)
		Expect(tenantA.Create(ctx, high)).To(Succeed())
		events := func() string {
			var evs corev1.EventList
			Expect(tenantA.List(ctx, &evs, client.InNamespace(s.ns))).To(Succeed())
			text := ""
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == high.Name {
					text += "\n" + e.Reason + ": " + e.Message
				}
			}
			return text
		}
		Eventually(events, 30*time.Second).Should(ContainSubstring("waiting for 3 pods of lower priority to terminate: 3 pods of other namespaces"))
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }, 30*time.Second).Should(Equal(s.nodes[0]))
		text := events()
		GinkgoWriter.Printf("what the preemptor's tenant reads:%s\n", text)
		for _, secret := range append(lows, nsB) {
			Expect(text).NotTo(ContainSubstring(secret), "tenant a reads tenant b's %q", secret)
		}
	})

	It("plans no move the Eviction API would refuse: a budget with an empty selector covers every pod of its namespace", func() {
		nsB, _ := sharedCluster(s)
		runningIn(nsB, "web-1")
		tenantB := editor(nsB, "bob")
		tenantBudget(tenantB, nsB, "everything", &metav1.LabelSelector{}, 0, 1)
		tenantA := editor(s.ns, "alice")
		big := s.pod("big", map[string]int64{"7g.80gb": 1})
		Expect(tenantA.Create(ctx, big)).To(Succeed())
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(
			ContainSubstring(fmt.Sprintf("defragmentation found no plan of at most %d moves of movable pods", mig.DefaultDefragMoves)))
		Consistently(func() *metav1.Time {
			var p corev1.Pod
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "web-1"}, &p)).To(Succeed())
			return p.DeletionTimestamp
		}, 3*time.Second).Should(BeNil(), "web-1 is not evicted")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragRefused.WithLabelValues(plugin.DefragRefusedEviction))).To(BeZero(),
			"no eviction was tried that the budget refuses")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(BeZero())
	})

	It("plans no two moves that together take a budget below what it allows", func() {
		nsB := otherTenant(s, 0)
		// Node a gets tenant b's two 1g.10gb replicas; node b a bare 4g.40gb, so that a 7g.80gb
		// fits on a only once both replicas have moved to b.
		a, b := s.ns+"-a", s.ns+"-b"
		s.addNode(a, 1)
		rsRef := createWebReplicaSet(nsB, 2)
		for _, name := range []string{"web-1", "web-2"} {
			Expect(k8s.Create(ctx, replicaIn(s, nsB, name, rsRef))).To(Succeed())
			boundTo(nsB, name, a)
			runningIn(nsB, name)
		}
		s.addNode(b, 1)
		s.cordonSeen(a, true)
		s.create(s.pod("four", map[string]int64{"4g.40gb": 1}))
		boundTo(s.ns, "four", b)
		s.cordonSeen(a, false)
		tenantB := editor(nsB, "bob")
		tenantBudget(tenantB, nsB, "web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, 1, 2)
		tenantA := editor(s.ns, "alice")
		big := s.pod("big", map[string]int64{"7g.80gb": 1})
		Expect(tenantA.Create(ctx, big)).To(Succeed())
		Eventually(func() string { return unschedulable(s.get(big.Name)) }, 30*time.Second).Should(
			ContainSubstring("defragmentation found no plan"))
		Consistently(func() int {
			var list corev1.PodList
			Expect(k8s.List(ctx, &list, client.InNamespace(nsB))).To(Succeed())
			n := 0
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					n++
				}
			}
			return n
		}, 3*time.Second).Should(Equal(2), "no replica is evicted for a plan the budget would cut short")
		Expect(testutil.ToFloat64(r.plugin.Metrics().DefragEvictions)).To(BeZero())
	})

	It("preempts the victims a budget allows rather than fewer that take it below what it allows", func() {
		ensurePriorityClasses()
		nsB := otherTenant(s, 0)
		node := s.ns + "-n1"
		s.addNode(node, 2)
		// GPU 0: p1 and p2, both of a budget allowing one disruption; GPU 1: q1, q2, q3 of none.
		x := map[string]string{"app": "x"}
		for _, h := range []struct {
			name, profile string
			gpu, start    int
			labels        map[string]string
		}{{"p1", "3g.40gb", 0, 0, x}, {"p2", "3g.40gb", 0, 4, x}, {"q1", "2g.20gb", 1, 0, nil}, {"q2", "2g.20gb", 1, 2, nil}, {"q3", "3g.40gb", 1, 4, nil}} {
			placeAt(s, nsB, node, h.name, h.profile, h.gpu, h.start, h.labels, prioLow, nil)
		}
		Eventually(func() int { return holders(r, node) }).Should(Equal(5))
		tenantB := editor(nsB, "bob")
		tenantBudget(tenantB, nsB, "x", &metav1.LabelSelector{MatchLabels: x}, 1, 2)
		tenantA := editor(s.ns, "alice")
		high := withPriority(s.pod("high", map[string]int64{"7g.80gb": 1}), prioHigh)
		Expect(tenantA.Create(ctx, high)).To(Succeed())
		boundTo(s.ns, high.Name, node)
		left := func() []string {
			var list corev1.PodList
			Expect(k8s.List(ctx, &list, client.InNamespace(nsB))).To(Succeed())
			var out []string
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					out = append(out, p.Name)
				}
			}
			return out
		}
		Expect(left()).To(ConsistOf("p1", "p2"), "the victims are q1, q2 and q3")
		Expect(s.allocationsOf(s.get(high.Name))[0].Spec.GPUUUID).To(Equal(framework.GPUUUID(node, 1)))
	})
})

var _ = Describe("A plan record a tenant writes", func() {
	It("is refused through pods/status and dropped at creation, so a restarted scheduler holds no room for it", func() {
		s := newScenario(fmt.Sprintf("forge-%d", time.Now().UnixNano()%100000))
		evict := func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
		}
		r := startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
		DeferCleanup(func() {
			if r != nil {
				r.stop()
			}
			s.cleanup()
		})
		node := s.ns + "-n1"
		s.addNode(node, 1)
		// What a restarted scheduler would hold from it, were it read: a room at GPU 0 @0 of n1.
		now := time.Now().UTC()
		forged := fmt.Sprintf(`{"evicted":%q,"deadline":%q,"node":%q,"target":{"gpu":%q,"profile":"7g.80gb","start":0,"size":8},`+
			`"moves":[{"podKey":"0","ownerKey":"0","node":%q,"to":{"gpu":%q,"profile":"1g.10gb","start":0,"size":1}}]}`,
			now.Format(time.RFC3339), now.Add(4*time.Minute).Format(time.RFC3339), node, framework.GPUUUID(node, 0), node, framework.GPUUUID(node, 0))
		record := corev1.PodCondition{Type: slicerv1alpha1.PodConditionDefragmentationPlan, Status: corev1.ConditionTrue,
			Reason: "Evicting", Message: forged, LastTransitionTime: metav1.Now()}
		tenant := editor(s.ns, "mallory")
		p := s.pod("forger", map[string]int64{"1g.10gb": 1})
		p.Spec.NodeSelector[poolLabel] = "nowhere" // never placed: it only carries the record
		p.Annotations = map[string]string{string(slicerv1alpha1.PodConditionDefragmentationPlan): forged}
		p.Status.Conditions = []corev1.PodCondition{record}
		Expect(tenant.Create(ctx, p)).To(Succeed())
		Expect(podCondition(s.get(p.Name), slicerv1alpha1.PodConditionDefragmentationPlan)).To(BeNil(), "the apiserver keeps no status a pod's creator writes")
		By("through pods/status: forbidden to a namespace editor")
		cur := s.get(p.Name)
		cur.Status.Conditions = append(cur.Status.Conditions, record)
		err := tenant.Status().Update(ctx, cur)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("forbidden"))
		By("through the pod itself: its status is not the pod's to change")
		// The scheduler writes the pod's PodScheduled condition meanwhile: read again on a
		// conflict.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur = s.get(p.Name)
			cur.Status.Conditions = append(cur.Status.Conditions, record)
			cur.Labels = map[string]string{"touched": "yes"}
			return tenant.Update(ctx, cur)
		})).To(Succeed())
		Expect(podCondition(s.get(p.Name), slicerv1alpha1.PodConditionDefragmentationPlan)).To(BeNil())
		By("a restarted scheduler holds no room: a probe, the first MIG pod it sees, runs the restore")
		r.stop()
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
		probe := s.create(s.pod("probe", map[string]int64{"1g.10gb": 1}))
		Eventually(func() string { return s.get(probe.Name).Spec.NodeName }, 30*time.Second).Should(Equal(node))
		Consistently(func() []string { return r.plugin.Cache().Holders(node)[framework.GPUUUID(node, 0)] }, 2*time.Second).ShouldNot(
			ContainElement(ContainSubstring("replacement of")), "a room is held from the tenant's record")
	})
})
