package operator_test

import (
	"encoding/json"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// upgradeCluster plays, in envtest, what the driver upgrade waits on: KMM's ordered upgrade
// on the node labels (KMM's internal/controllers/node_label_module_version_reconciler.go and
// module_nmc_reconciler.go, one transition per pass), the agent DaemonSet's controller (its
// pod on the nodes its affinity selects), the kubelet (a terminating pod goes) and the agent
// (an allocation whose pod is gone is released). The operator under test is real.
type upgradeCluster struct {
	agentNS string
	nodes   []string
	tenant  string
	// looked, when set, is each node's upgrade step as the spec last looked at it: the
	// DaemonSet's controller puts the agent back only once the look saw the node past its
	// Driver step, so the Verify step cannot begin and end within one pass unseen.
	looked map[string]string
}

func (u *upgradeCluster) labels() (module, worker, ready string) {
	return render.KMMModuleVersionLabel(u.agentNS, render.ModuleName), render.KMMWorkerVersionLabel(u.agentNS, render.ModuleName), render.KMMReadyLabel(u.agentNS, render.ModuleName)
}

func (u *upgradeCluster) node(g Gomega, name string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

// pass runs every player once.
func (u *upgradeCluster) pass(g Gomega) {
	_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, u.agentNS)
	g.Expect(err).NotTo(HaveOccurred())
	module := &kmmv1beta1.Module{}
	moduleVersion := ""
	if err := admin.Get(ctx, client.ObjectKey{Namespace: u.agentNS, Name: render.ModuleName}, module); err == nil {
		moduleVersion = module.Spec.ModuleLoader.Container.Version
	}
	for _, name := range u.nodes {
		u.kmm(g, name, moduleVersion)
		u.daemonSet(g, name)
	}
	u.kubeletAndAgent(g)
}

// kmm makes one transition of KMM's ordered upgrade on a node: the worker label follows the
// module label through an unload (ready label off) and a load of the Module's version.
func (u *upgradeCluster) kmm(g Gomega, name, moduleVersion string) {
	moduleL, workerL, readyL := u.labels()
	n := u.node(g, name)
	base := n.DeepCopy()
	mv, wv := n.Labels[moduleL], n.Labels[workerL]
	_, ready := n.Labels[readyL]
	switch {
	case mv == "":
		return
	case wv != mv && wv != "":
		delete(n.Labels, workerL)
	case wv != mv && ready:
		delete(n.Labels, readyL) // the unload worker pod succeeded
	case wv != mv:
		n.Labels[workerL] = mv
	case !ready && moduleVersion == wv:
		n.Labels[readyL] = "" // the load worker pod succeeded with the Module's version
	default:
		return
	}
	g.Expect(admin.Patch(ctx, n, client.MergeFrom(base))).To(Succeed())
}

// daemonSet keeps one ready agent pod on a node while the agent's affinity selects it.
func (u *upgradeCluster) daemonSet(g Gomega, name string) {
	_, _, readyL := u.labels()
	n := u.node(g, name)
	_, ready := n.Labels[readyL]
	driver := string(slicerv1alpha1.DriverUpgradeDriver)
	want := n.Labels[slicerv1alpha1.LabelMIGCapable] == "true" && ready && n.Labels[slicerv1alpha1.LabelDriverUpgrade] != driver
	if step, ok := u.looked[name]; ok && step == driver {
		want = false
	}
	pod := &corev1.Pod{}
	key := client.ObjectKey{Namespace: u.agentNS, Name: "agent-" + name}
	err := admin.Get(ctx, key, pod)
	switch {
	case err == nil && !want:
		g.Expect(client.IgnoreNotFound(admin.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
	case apierrors.IsNotFound(err) && want:
		l := render.ComponentPodLabels(render.ComponentAgent)
		l[render.ManagedByLabel] = render.ManagedByValue
		pod = builder.Pod(u.agentNS, key.Name).Node(name).Container("agent", builder.None).Obj()
		pod.Labels = l
		g.Expect(admin.Create(ctx, pod)).To(Succeed())
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		g.Expect(admin.Status().Update(ctx, pod)).To(Succeed())
	case err != nil && !apierrors.IsNotFound(err):
		g.Expect(err).NotTo(HaveOccurred())
	}
}

// kubeletAndAgent: a terminating tenant pod goes (no kubelet confirms it in envtest), and the
// allocation of a pod that is gone is released (the agent's finalizer removed).
func (u *upgradeCluster) kubeletAndAgent(g Gomega) {
	var pods corev1.PodList
	g.Expect(admin.List(ctx, &pods, client.InNamespace(u.tenant))).To(Succeed())
	live := map[types.UID]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			g.Expect(client.IgnoreNotFound(admin.Delete(ctx, p, client.GracePeriodSeconds(0)))).To(Succeed())
			continue
		}
		live[p.UID] = true
	}
	var allocs slicerv1alpha1.SliceAllocationList
	g.Expect(admin.List(ctx, &allocs, client.InNamespace(u.tenant))).To(Succeed())
	for i := range allocs.Items {
		a := &allocs.Items[i]
		if live[types.UID(a.Spec.PodUID)] {
			continue
		}
		g.Expect(client.IgnoreNotFound(admin.Delete(ctx, a))).To(Succeed())
		patch := client.MergeFrom(a.DeepCopy())
		a.Finalizers = nil
		g.Expect(client.IgnoreNotFound(admin.Patch(ctx, a, patch))).To(Succeed())
	}
}

// gpuPod is a tenant pod on node holding one slice (its allocation created as the scheduler
// creates it); owned by a controller unless bare.
func (u *upgradeCluster) gpuPod(name, node string, bare bool, labels map[string]string) *corev1.Pod {
	GinkgoHelper()
	p := builder.Pod(u.tenant, name).Node(node).Container("app", builder.None).Obj()
	p.Labels = labels
	if !bare {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "trainer-1", UID: "rs-uid", Controller: ptr.To(true)}}
	}
	Expect(admin.Create(ctx, p)).To(Succeed())
	// Running and ready, as its kubelet would report it: the Eviction API lets a pending pod go
	// whatever its disruption budget says.
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	Expect(admin.Status().Update(ctx, p)).To(Succeed())
	a := placed(u.tenant, name+"-0", node)
	a.Spec.PodName, a.Spec.PodUID = p.Name, string(p.UID)
	a.Labels[slicerv1alpha1.LabelPodUID] = string(p.UID)
	a.OwnerReferences[0].Name, a.OwnerReferences[0].UID = p.Name, p.UID
	scheduler := asUser(framework.ImpersonatedConfig(env.Config, operatorNamespace, render.SchedulerName))
	Eventually(func() error { return scheduler.Create(ctx, a.DeepCopy()) }).Should(Succeed())
	return p
}

func setDriverImage(image string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		s := getSlicer(g)
		s.Spec.Driver.Image = image
		g.Expect(admin.Update(ctx, s)).To(Succeed())
	}).Should(Succeed())
}

// A rolling driver upgrade (issue 42): nodes one at a time, MIG pods evicted first (a pod
// under a disruption budget waits for it), the agent off while KMM swaps the driver, the
// node fenced until the agent serves again; an operator restarted at every step goes on
// from the labels; a drain that does not finish stops the rollout and touches no other node.
var _ = Describe("driver upgrade", Ordered, func() {
	var (
		u  *upgradeCluster
		op *runningOperator
	)
	BeforeEach(func() {
		u = &upgradeCluster{agentNS: nextAgentNamespace(), nodes: []string{"upgrade-a", "upgrade-b"}, tenant: "upgrade-tenant"}
		createNamespace(u.tenant)
		for _, name := range u.nodes {
			n := builder.Node(name).Label(slicerv1alpha1.LabelMIGCapable, "true").Label(slicerv1alpha1.LabelGPUModel, "H100-80GB").Ready().Obj()
			Expect(framework.CreateNode(ctx, admin, n)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, n))).To(Succeed()) })
		}
		op = startOperator(operatorOptions{agentNamespace: u.agentNS, slicerPatch: fastUpgradePoll})
		Expect(admin.Create(ctx, newSlicer(func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
			s.Spec.Driver.Image = "reg.test/driver:v1"
			s.Spec.Driver.Upgrade.DrainTimeoutSeconds = 10
		}))).To(Succeed())
		By("installing: every node asks KMM for the first version, which KMM loads")
		Eventually(func(g Gomega) {
			u.pass(g)
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(s.Status.DriverUpgrade.UpdatedNodes).To(Equal(int32(2)))
			g.Expect(condition(s, slicerv1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionTrue))
			for _, name := range u.nodes {
				g.Expect(u.node(g, name).Labels).To(HaveKey(render.KMMReadyLabel(u.agentNS, render.ModuleName)))
			}
		}, time.Minute).Should(Succeed())
	})
	AfterEach(func() {
		op.stop()
		cleanSlate()
		Expect(admin.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(u.tenant), client.GracePeriodSeconds(0))).To(Succeed())
		Expect(admin.DeleteAllOf(ctx, &policyv1.PodDisruptionBudget{}, client.InNamespace(u.tenant))).To(Succeed())
	})

	It("upgrades one node at a time, drains it through evictions, and resumes after a restart at every step", func() {
		moduleL, _, _ := u.labels()
		v1 := getSlicer(Default).Status.DriverUpgrade.TargetVersion
		pdbLabels := map[string]string{"app": "trainer"}
		u.gpuPod("trainer-0", "upgrade-a", false, pdbLabels)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: u.tenant, Name: "trainer"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{MatchLabels: pdbLabels}},
		}
		Expect(admin.Create(ctx, pdb)).To(Succeed())

		setDriverImage("reg.test/driver:v2")
		var v2 string
		Eventually(func(g Gomega) {
			v2 = getSlicer(g).Status.DriverUpgrade.TargetVersion
			g.Expect(v2).NotTo(Equal(v1))
		}).Should(Succeed())
		module := &kmmv1beta1.Module{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: u.agentNS, Name: render.ModuleName}, module)).To(Succeed())
		Expect(module.Spec.ModuleLoader.Container.Version).To(Equal(v2))

		type seen struct{ node, step string }
		var steps []seen
		last := map[string]string{}
		u.looked = last
		budgetWaited := false
		restarts := 0
		Eventually(func(g Gomega) {
			// Look first, then play: a step that waits for a player (KMM, the DaemonSet) is
			// seen before the player lets it end.
			defer u.pass(g)
			under := 0
			var changed []seen
			for _, name := range u.nodes {
				n := u.node(g, name)
				step := n.Labels[slicerv1alpha1.LabelDriverUpgrade]
				if step != "" {
					under++
				}
				if step != last[name] {
					last[name] = step
					changed = append(changed, seen{name, step})
				}
				if name == "upgrade-a" && step == string(slicerv1alpha1.DriverUpgradeDrain) {
					// The disruption budget refuses the eviction until kube-controller-manager's
					// disruption controller (played here) allows one.
					p := &corev1.Pod{}
					err := admin.Get(ctx, client.ObjectKey{Namespace: u.tenant, Name: "trainer-0"}, p)
					if err == nil && p.DeletionTimestamp == nil && !budgetWaited {
						time.Sleep(3 * time.Second)
						g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
						g.Expect(p.DeletionTimestamp).To(BeNil(), "evicted against its disruption budget")
						budgetWaited = true
						live := &policyv1.PodDisruptionBudget{}
						g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(pdb), live)).To(Succeed())
						live.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: live.Generation, DisruptionsAllowed: 1, CurrentHealthy: 1, DesiredHealthy: 0, ExpectedPods: 1}
						g.Expect(admin.Status().Update(ctx, live)).To(Succeed())
					}
				}
			}
			if len(changed) > 0 {
				// A node that finishes leaves before the next starts (both in one round).
				sort.SliceStable(changed, func(i, j int) bool { return changed[i].step == "" && changed[j].step != "" })
				steps = append(steps, changed...)
				// Restart the operator at every step: it resumes from the labels.
				op.stop()
				op = startOperator(operatorOptions{agentNamespace: u.agentNS, slicerPatch: fastUpgradePoll})
				restarts++
			}
			g.Expect(under).To(BeNumerically("<=", 1), "two nodes under way with maxUnavailable 1")
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(c.ObservedGeneration).To(Equal(s.Generation))
		}, 3*time.Minute, 200*time.Millisecond).Should(Succeed())

		GinkgoWriter.Printf("steps seen (%d operator restarts): %v\n", restarts, steps)
		// The node without MIG pods first, each node through its steps in order. A step can end
		// between two looks (upgrade-b, with nothing to drain, may leave Drain at once); Driver and
		// Verify wait for the players, and upgrade-a's Drain for its budget, so those are seen,
		// each with a restart.
		order := map[string]int{string(slicerv1alpha1.DriverUpgradeDrain): 0, string(slicerv1alpha1.DriverUpgradeDriver): 1, string(slicerv1alpha1.DriverUpgradeVerify): 2, "": 3}
		byNode := map[string][]string{}
		aStarted := false
		for _, st := range steps {
			byNode[st.node] = append(byNode[st.node], st.step)
			aStarted = aStarted || st.node == "upgrade-a"
			Expect(aStarted && st.node == "upgrade-b").To(BeFalse(), "upgrade-b under way after upgrade-a started: %v", steps)
		}
		for _, name := range u.nodes {
			got := byNode[name]
			Expect(got).To(ContainElements(string(slicerv1alpha1.DriverUpgradeDriver), string(slicerv1alpha1.DriverUpgradeVerify), ""), name)
			for i := 1; i < len(got); i++ {
				Expect(order[got[i]]).To(BeNumerically(">", order[got[i-1]]), "%s went %v", name, got)
			}
		}
		Expect(byNode["upgrade-a"]).To(HaveExactElements(string(slicerv1alpha1.DriverUpgradeDrain), string(slicerv1alpha1.DriverUpgradeDriver), string(slicerv1alpha1.DriverUpgradeVerify), ""))
		Expect(budgetWaited).To(BeTrue(), "the PDB-protected pod was not seen waiting for its budget")
		err := admin.Get(ctx, client.ObjectKey{Namespace: u.tenant, Name: "trainer-0"}, &corev1.Pod{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the pod on upgrade-a was not evicted: %v", err)
		s := getSlicer(Default)
		Expect(s.Status.DriverUpgrade).To(Equal(&slicerv1alpha1.DriverUpgradeStatus{TargetVersion: v2, UpdatedNodes: 2}))
		for _, name := range u.nodes {
			n := u.node(Default, name)
			Expect(n.Labels).To(HaveKeyWithValue(moduleL, v2))
			Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelDriverUpgrade))
			Expect(n.Annotations).NotTo(HaveKey(slicerv1alpha1.AnnotationDriverUpgradeSince))
			Expect(n.Spec.Unschedulable).To(BeFalse(), "the node was cordoned")
			// Written by server-side apply, under the upgrade's own field manager.
			Expect(labelManagers(n, moduleL)).To(Equal([]string{controller.DriverUpgradeFieldManager}), name)
		}
	})

	It("releases a node someone else labelled under way, once it runs the target", func() {
		// The step label set by hand (kubectl label), on a node that runs the target: the
		// operator's apply cannot remove a label it does not own, so it deletes it.
		n := u.node(Default, "upgrade-b")
		base := n.DeepCopy()
		n.Labels[slicerv1alpha1.LabelDriverUpgrade] = string(slicerv1alpha1.DriverUpgradeDrain)
		Expect(admin.Patch(ctx, n, client.MergeFrom(base))).To(Succeed())
		Eventually(func(g Gomega) {
			u.pass(g)
			g.Expect(u.node(g, "upgrade-b").Labels).NotTo(HaveKey(slicerv1alpha1.LabelDriverUpgrade))
			g.Expect(u.node(g, "upgrade-b").Annotations).NotTo(HaveKey(slicerv1alpha1.AnnotationDriverUpgradeSince))
			c := condition(getSlicer(g), slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		}).Should(Succeed())
	})

	It("stops on a drain that does not finish, touches no other node, and goes on once the pod is gone", func() {
		moduleL, _, _ := u.labels()
		v1 := getSlicer(Default).Status.DriverUpgrade.TargetVersion
		bare := u.gpuPod("notebook", "upgrade-a", true, nil)
		// The other node has a MIG pod too, so upgrade-a (first by name) goes first.
		u.gpuPod("trainer-0", "upgrade-b", false, nil)
		before := u.node(Default, "upgrade-b")

		setDriverImage("reg.test/driver:v2")
		Eventually(func(g Gomega) {
			u.pass(g)
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonDriverUpgradeStalled), c.Message)
			g.Expect(c.Message).To(ContainSubstring("node upgrade-a (Drain): drain timed out after 10s"))
			g.Expect(c.Message).To(ContainSubstring(u.tenant + "/notebook"))
			g.Expect(s.Status.DriverUpgrade.Nodes).To(HaveLen(1))
			g.Expect(testutil.ToFloat64(op.metrics.Upgrade.Stalled)).To(Equal(1.0))
		}, time.Minute, 200*time.Millisecond).Should(Succeed())
		By("having touched nothing else: the other node, its pod, the bare pod")
		after := u.node(Default, "upgrade-b")
		Expect(after.Labels).To(Equal(before.Labels))
		Expect(after.Annotations).To(Equal(before.Annotations))
		for _, name := range []string{"notebook", "trainer-0"} {
			p := &corev1.Pod{}
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: u.tenant, Name: name}, p)).To(Succeed())
			Expect(p.DeletionTimestamp).To(BeNil(), name)
		}
		Expect(u.node(Default, "upgrade-a").Labels).To(HaveKeyWithValue(moduleL, v1), "KMM was asked for the new version before the drain ended")

		By("going on once its user deletes the pod")
		Expect(admin.Delete(ctx, bare)).To(Succeed())
		Eventually(func(g Gomega) {
			u.pass(g)
			s := getSlicer(g)
			c := condition(s, slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
		Expect(testutil.ToFloat64(op.metrics.Upgrade.Stalled)).To(Equal(0.0))
	})

	It("fences the DRA devices of the node under way with a DeviceTaintRule (DRA frontend)", func() {
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			s.Spec.Frontend = slicerv1alpha1.FrontendDRA
			g.Expect(admin.Update(ctx, s)).To(Succeed())
		}).Should(Succeed())
		bare := u.gpuPod("notebook", "upgrade-a", true, nil) // holds upgrade-a in its drain
		u.gpuPod("trainer-0", "upgrade-b", false, nil)
		setDriverImage("reg.test/driver:v2")
		rule := render.DriverUpgradeTaintRule("upgrade-a")
		Eventually(func(g Gomega) {
			u.pass(g)
			live := &resourceapi.DeviceTaintRule{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(rule), live)).To(Succeed())
			g.Expect(live.Spec.DeviceSelector).To(Equal(rule.Spec.DeviceSelector))
			g.Expect(live.Spec.Taint.Key).To(Equal(slicerv1alpha1.LabelDriverUpgrade))
			g.Expect(live.Spec.Taint.Effect).To(Equal(resourceapi.DeviceTaintEffectNoSchedule))
		}).Should(Succeed())
		var rules resourceapi.DeviceTaintRuleList
		Expect(admin.List(ctx, &rules)).To(Succeed())
		Expect(rules.Items).To(HaveLen(1), "only the node under way is fenced")
		Expect(admin.Delete(ctx, bare)).To(Succeed())
		Eventually(func(g Gomega) {
			u.pass(g)
			c := condition(getSlicer(g), slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			g.Expect(admin.List(ctx, &rules)).To(Succeed())
			g.Expect(rules.Items).To(BeEmpty())
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	})

	It("rolls back by editing the spec back: the node under way returns to the old version", func() {
		moduleL, workerL, _ := u.labels()
		v1 := getSlicer(Default).Status.DriverUpgrade.TargetVersion
		u.gpuPod("notebook", "upgrade-a", true, nil) // holds upgrade-a in its drain
		u.gpuPod("trainer-0", "upgrade-b", false, nil)
		setDriverImage("reg.test/driver:v2")
		Eventually(func(g Gomega) {
			u.pass(g)
			g.Expect(u.node(g, "upgrade-a").Labels).To(HaveKeyWithValue(slicerv1alpha1.LabelDriverUpgrade, string(slicerv1alpha1.DriverUpgradeDrain)))
		}).Should(Succeed())
		setDriverImage("reg.test/driver:v1")
		Eventually(func(g Gomega) {
			u.pass(g)
			s := getSlicer(g)
			g.Expect(s.Status.DriverUpgrade.TargetVersion).To(Equal(v1))
			c := condition(s, slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			for _, name := range u.nodes {
				n := u.node(g, name)
				g.Expect(n.Labels).NotTo(HaveKey(slicerv1alpha1.LabelDriverUpgrade))
				g.Expect(n.Labels).To(HaveKeyWithValue(moduleL, v1))
				g.Expect(n.Labels).To(HaveKeyWithValue(workerL, v1))
			}
		}).Should(Succeed())
		p := &corev1.Pod{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: u.tenant, Name: "notebook"}, p)).To(Succeed())
		Expect(p.DeletionTimestamp).To(BeNil())
	})
})

// labelManagers are the field managers of a node's label key (its managedFields).
func labelManagers(n *corev1.Node, key string) []string {
	GinkgoHelper()
	var out []string
	for _, mf := range n.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]map[string]any
		Expect(json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields)).To(Succeed())
		if _, ok := fields["f:metadata"]["f:labels"]["f:"+key]; ok {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// fastUpgradePoll observes a rollout under way every 200 ms.
func fastUpgradePoll(r *controller.SlicerReconciler) { r.UpgradePoll = 200 * time.Millisecond }

// An install from before ordered upgrades (issue 42, docs/driver-upgrade.md): KMM loaded the
// driver from a Module without a version. Writing a version would unload every node without
// KMM's worker label, so the operator labels the nodes KMM loaded first: with the target when
// the live Module loads what the spec asks (nothing drains), with the live settings' version
// when it does not (then the nodes are upgraded like any other).
var _ = Describe("driver upgrade from an unversioned Module", Ordered, func() {
	var (
		u  *upgradeCluster
		op *runningOperator
	)
	AfterEach(func() {
		if op != nil {
			op.stop()
		}
		cleanSlate()
	})

	// install plays the older operator: the Slicer, the Module it rendered (no version), and
	// nodes KMM loaded from it (ready label, no version label).
	install := func(liveImage string) string {
		GinkgoHelper()
		u = &upgradeCluster{agentNS: nextAgentNamespace(), nodes: []string{"legacy-a", "legacy-b"}, tenant: "upgrade-tenant"}
		createNamespace(u.tenant)
		createNamespace(u.agentNS)
		_, _, readyL := u.labels()
		for _, name := range u.nodes {
			n := builder.Node(name).Label(slicerv1alpha1.LabelMIGCapable, "true").Label(slicerv1alpha1.LabelGPUModel, "H100-80GB").Label(readyL, "").Ready().Obj()
			Expect(framework.CreateNode(ctx, admin, n)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, n))).To(Succeed()) })
		}
		Expect(admin.Create(ctx, newSlicer(func(s *slicerv1alpha1.Slicer) {
			s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
			s.Spec.Driver.Image = "reg.test/driver:v1"
		}))).To(Succeed())
		s := getSlicer(Default)
		o := render.Options{Slicer: s.DeepCopy(), Namespace: operatorNamespace, AgentNamespace: u.agentNS, Images: render.Images{Driver: "reg.test/driver"}}
		target, err := render.DriverVersion(o)
		Expect(err).NotTo(HaveOccurred())
		o.Slicer.Spec.Driver.Image = liveImage
		m, err := render.Module(o)
		Expect(err).NotTo(HaveOccurred())
		m.Spec.ModuleLoader.Container.Version = ""
		Expect(admin.Create(ctx, m)).To(Succeed())
		return target
	}

	It("labels the nodes KMM loaded with the version they run before it versions the Module; nothing drains", func() {
		target := install("reg.test/driver:v1")
		moduleL, workerL, readyL := u.labels()
		op = startOperator(operatorOptions{agentNamespace: u.agentNS, slicerPatch: fastUpgradePoll})
		unloaded := map[string]bool{}
		Eventually(func(g Gomega) {
			u.pass(g)
			for _, name := range u.nodes {
				l := u.node(g, name).Labels
				if _, ok := l[readyL]; !ok {
					unloaded[name] = true // KMM unloaded the driver (its ready label went)
				}
				g.Expect(l).NotTo(HaveKey(slicerv1alpha1.LabelDriverUpgrade), "%s drained for a driver it runs", name)
				g.Expect(l).To(HaveKeyWithValue(moduleL, target), name)
				g.Expect(l).To(HaveKeyWithValue(workerL, target), name)
			}
			m := &kmmv1beta1.Module{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: u.agentNS, Name: render.ModuleName}, m)).To(Succeed())
			g.Expect(m.Spec.ModuleLoader.Container.Version).To(Equal(target))
			c := condition(getSlicer(g), slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		}, time.Minute, 200*time.Millisecond).Should(Succeed())
		Expect(unloaded).To(BeEmpty(), "versioning the Module unloaded the driver under running pods")
	})

	It("labels them with the live Module's version when the spec asks for another driver, then upgrades them", func() {
		target := install("reg.test/driver:v0")
		moduleL, workerL, _ := u.labels()
		op = startOperator(operatorOptions{agentNamespace: u.agentNS, slicerPatch: fastUpgradePoll})
		var old string
		Eventually(func(g Gomega) {
			l := u.node(g, "legacy-a").Labels
			old = l[moduleL]
			g.Expect(old).NotTo(BeEmpty())
			g.Expect(l).To(HaveKeyWithValue(workerL, old))
		}).Should(Succeed())
		Expect(old).NotTo(Equal(target))
		Eventually(func(g Gomega) {
			u.pass(g)
			c := condition(getSlicer(g), slicerv1alpha1.ConditionDriverUpgraded)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
			for _, name := range u.nodes {
				g.Expect(u.node(g, name).Labels).To(HaveKeyWithValue(workerL, target), name)
			}
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	})
})
