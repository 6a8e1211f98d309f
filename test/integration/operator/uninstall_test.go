package operator_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// Issue 28 item 5: deleting the Slicer while pods hold MIG slices waits (default), naming
// the pods, and removes nothing; forced, it deletes the pods, lets the agents release
// every allocation (only they may: the allocation guard), and only then removes the
// agents, the driver and the rest. Covers I12 and I2 at uninstall.
var _ = Describe("Uninstall with MIG pods running", Ordered, func() {
	AfterEach(cleanSlate)

	const tenant = "uninstall-tenant"
	const node = "node-1"

	// runningPod creates a pod (unscheduled: envtest has no kubelet, so its deletion is
	// immediate) and the allocation the scheduler commits for it.
	runningPod := func(name string) {
		GinkgoHelper()
		pod := builder.Pod(tenant, name).Container("c", builder.None).Obj()
		Expect(admin.Create(ctx, pod)).To(Succeed())
		a := placed(tenant, name+"-0", node)
		a.Spec.PodName, a.Spec.PodUID = name, string(pod.UID)
		a.Labels[slicerv1alpha1.LabelPodUID] = string(pod.UID)
		a.OwnerReferences[0].Name, a.OwnerReferences[0].UID = name, pod.UID
		scheduler := asUser(framework.ImpersonatedConfig(env.Config, operatorNamespace, render.SchedulerName))
		// The apiserver compiles a new policy a moment after it is created.
		Eventually(func() error { return scheduler.Create(ctx, a.DeepCopy()) }).Should(Succeed())
	}

	// agentPass plays one reconcile of the node's agent, with its ServiceAccount and node
	// (the guards apply): it deletes the allocations of pods that are gone and removes its
	// finalizer from the deleting ones (their instances destroyed), as
	// device-plugin/agent's collect and removeFinalizers do.
	agentPass := func(g Gomega, agentNamespace string) {
		agent := agentOn(agentNamespace, node)
		var list slicerv1alpha1.SliceAllocationList
		g.Expect(agent.List(ctx, &list, client.InNamespace(tenant))).To(Succeed())
		for i := range list.Items {
			a := &list.Items[i]
			if a.DeletionTimestamp != nil {
				patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
				controllerutil.RemoveFinalizer(a, slicerv1alpha1.AllocationFinalizer)
				g.Expect(client.IgnoreNotFound(agent.Patch(ctx, a, patch))).To(Succeed())
				continue
			}
			err := agent.Get(ctx, client.ObjectKey{Namespace: tenant, Name: a.Spec.PodName}, &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				g.Expect(client.IgnoreNotFound(agent.Delete(ctx, a, client.Preconditions{UID: &a.UID}))).To(Succeed())
			}
		}
	}

	allocations := func(g Gomega) []slicerv1alpha1.SliceAllocation {
		var list slicerv1alpha1.SliceAllocationList
		g.Expect(admin.List(ctx, &list, client.InNamespace(tenant))).To(Succeed())
		return list.Items
	}

	// installed expects the Slicer, with its finalizer, the scheduler, the agents and the
	// cluster-scoped objects (driver Module included) all still there.
	installed := func(g Gomega, agentNamespace string) {
		s := getSlicer(g)
		g.Expect(controllerutil.ContainsFinalizer(s, controller.Finalizer)).To(BeTrue())
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: render.AgentName}, &appsv1.DaemonSet{})).To(Succeed(), "the agents were removed while slices are held")
		for _, r := range clusterRefs(agentNamespace) {
			_, err := getRef(r)
			g.Expect(err).NotTo(HaveOccurred(), "%s removed while slices are held", r)
		}
	}

	// install starts the operator, the Slicer and twelve pods holding slices.
	install := func(mutate ...func(*slicerv1alpha1.Slicer)) (string, *runningOperator) {
		GinkgoHelper()
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		Expect(admin.Create(ctx, newSlicer(mutate...))).To(Succeed())
		waitAvailable(ns)
		createNamespace(tenant)
		// the node's NodeAccelerator, as its agent creates it
		na := &slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: slicerv1alpha1.NodeAcceleratorSpec{NodeName: node}}
		Expect(client.IgnoreAlreadyExists(admin.Create(ctx, na))).To(Succeed())
		for i := range 12 {
			runningPod(fmt.Sprintf("train-%02d", i))
		}
		Consistently(func(g Gomega) { agentPass(g, ns) }, time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(allocations(Default)).To(HaveLen(12), "the agent keeps the allocations of running pods")
		return ns, op
	}

	// releasedAndRemoved runs the agent until the Slicer is gone, then expects nothing left.
	releasedAndRemoved := func(ns string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			if apierrors.IsNotFound(err) {
				return
			}
			// Once the allocations are gone the agent's role goes too: pass only while the
			// Slicer is there.
			agentPass(g, ns)
			g.Expect(err).To(HaveOccurred(), "Slicer still there")
		}, time.Minute).Should(Succeed())
		Expect(allocations(Default)).To(BeEmpty(), "no allocation (and so no finalizer) left")
		var pods corev1.PodList
		Expect(admin.List(ctx, &pods, client.InNamespace(tenant))).To(Succeed())
		Expect(pods.Items).To(BeEmpty())
		for _, r := range clusterRefs(ns) {
			_, err := getRef(r)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s left behind: %v", r, err)
		}
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, &appsv1.DaemonSet{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "agents left behind: %v", err)
		var nas slicerv1alpha1.NodeAcceleratorList
		Expect(admin.List(ctx, &nas)).To(Succeed())
		Expect(nas.Items).To(BeEmpty(), "NodeAccelerators left behind")
	}

	It("waits, by default, with a condition naming the pods and everything running; set to Force meanwhile, it releases the slices and removes the rest", func() {
		ns, op := install()
		defer op.stop()

		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getSlicer(g), slicerv1alpha1.ConditionSlicesReleased)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonWaitingForPods))
			g.Expect(c.Message).To(ContainSubstring("12 pods hold MIG slices: " + tenant + "/train-00, " + tenant + "/train-01"))
			g.Expect(c.Message).To(ContainSubstring("and 2 more"), "the list is capped")
			g.Expect(c.Message).To(ContainSubstring("spec.uninstall.policy to Force"))
		}).Should(Succeed())
		// Longer than the operator's DeletionTimeout (5 s here): waiting for pods never times
		// out. The agent keeps running.
		Consistently(func(g Gomega) {
			agentPass(g, ns)
			installed(g, ns)
			g.Expect(allocations(g)).To(HaveLen(12))
			var pods corev1.PodList
			g.Expect(admin.List(ctx, &pods, client.InNamespace(tenant))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(12))
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})).To(Succeed())
		}, 8*time.Second, 500*time.Millisecond).Should(Succeed())

		s := getSlicer(Default)
		s.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce
		Expect(admin.Update(ctx, s)).To(Succeed())
		releasedAndRemoved(ns)
	})

	It("forced, deletes the scheduler and the pods first, waits for the agents to release every allocation, then removes agents, driver and the rest, in that order", func() {
		ns, op := install(func(s *slicerv1alpha1.Slicer) { s.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce })
		defer op.stop()

		By("the agent stopped: the pods go, but nothing else while allocations remain")
		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(admin.List(ctx, &pods, client.InNamespace(tenant))).To(Succeed())
			g.Expect(pods.Items).To(BeEmpty(), "the pods that hold slices are deleted first")
			err := admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the scheduler goes before the pods: %v", err)
			c := condition(getSlicer(g), slicerv1alpha1.ConditionSlicesReleased)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonReleasingSlices))
			g.Expect(c.Message).To(ContainSubstring(tenant + "/train-00"))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			installed(g, ns)
			g.Expect(allocations(g)).To(HaveLen(12), "only the agent releases allocations")
		}, 8*time.Second, 500*time.Millisecond).Should(Succeed())

		By("the agent back: it releases every allocation, then the teardown runs to the end")
		releasedAndRemoved(ns)

		By("in order: the pods, then the agents, then the driver, then the rest, then the NodeAccelerators")
		_, writes := op.writes.count()
		at := func(what string) int {
			for i, w := range writes {
				if strings.Contains(w, what) {
					return i
				}
			}
			Fail(fmt.Sprintf("no write %q in %v", what, writes))
			return -1
		}
		// deleteAndCheck deletes what it read, as unstructured objects.
		scheduler, pods := at("Unstructured "+operatorNamespace+"/"+render.SchedulerName), at("delete *v1.Pod "+tenant+"/")
		agents, driver := at("Unstructured "+ns+"/"+render.AgentName), at("Unstructured "+ns+"/"+render.ModuleName)
		guard := at("Unstructured /" + render.AllocationGuardName)
		accelerator := at("NodeAccelerator /" + node)
		Expect(scheduler).To(BeNumerically("<", pods))
		Expect(pods).To(BeNumerically("<", agents))
		Expect(agents).To(BeNumerically("<", driver))
		Expect(driver).To(BeNumerically("<", guard))
		Expect(guard).To(BeNumerically("<", accelerator), "the NodeAccelerators go after the rest (no agent recreates them)")
	})
})
