package operator_test

import (
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

func draSlicer(s *slicerv1alpha1.Slicer) {
	s.Spec.Frontend = slicerv1alpha1.FrontendDRA
	s.Spec.Driver.Mode = slicerv1alpha1.DriverModeEmulated
	s.Spec.Agent.EmulatedGPUs = []slicerv1alpha1.EmulatedGPUs{{Model: "H100-80GB", Count: 2}}
	s.Spec.NodeSelection.NodeFeatureRule = slicerv1alpha1.FeatureDisabled
}

// deviceClassNames lists Slicer's DeviceClasses, sorted.
func deviceClassNames(g Gomega) []string {
	var list resourceapi.DeviceClassList
	g.Expect(admin.List(ctx, &list, client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue})).To(Succeed())
	var names []string
	for _, c := range list.Items {
		if c.DeletionTimestamp == nil {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return names
}

func classesOf(model string) []string {
	m, err := mig.ParseModel(model)
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, p := range m.Profiles() {
		names = append(names, migdra.ClassName(p.Name))
	}
	names = append(names, migdra.WholeClassName)
	slices.Sort(names)
	return names
}

func setGPUModel(node, model string) {
	Eventually(func(g Gomega) {
		var n corev1.Node
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, &n)).To(Succeed())
		n.Labels[slicerv1alpha1.LabelGPUModel] = model
		g.Expect(admin.Update(ctx, &n)).To(Succeed())
	}).Should(Succeed())
}

// setAcceleratorGPUs writes the GPUs of node's NodeAccelerator status, as its agent would.
func setAcceleratorGPUs(node string, gpus []slicerv1alpha1.GPUStatus) {
	Eventually(func(g Gomega) {
		var na slicerv1alpha1.NodeAccelerator
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: node}, &na)).To(Succeed())
		na.Status.GPUs = gpus
		g.Expect(admin.Status().Update(ctx, &na)).To(Succeed())
	}).Should(Succeed())
}

// driverSlice is a one-device ResourceSlice of driver on node.
func driverSlice(name, driver, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  []resourceapi.Device{{Name: "dev-0"}},
		},
	}
}

// sliceNames lists the ResourceSlices of every driver, sorted.
func sliceNames(g Gomega) []string {
	var list resourceapi.ResourceSliceList
	g.Expect(admin.List(ctx, &list)).To(Succeed())
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// fakeDRAAgent creates the pod the agent DaemonSet of namespace ns would run on node (no
// DaemonSet controller runs here): its labels and its container's arguments.
func fakeDRAAgent(ns, node string) *corev1.Pod {
	var ds appsv1.DaemonSet
	Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, &ds)).To(Succeed())
	c := ds.Spec.Template.Spec.Containers[0]
	Expect(c.Args).To(ContainElement(render.AgentFrontendDRAArg))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.AgentName + "-fake", Labels: ds.Spec.Template.Labels},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			ServiceAccountName:           render.AgentName,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: c.Name, Image: c.Image, Args: c.Args}},
		},
	}
	Expect(admin.Create(ctx, pod)).To(Succeed())
	return pod
}

// publishSlices creates a ResourceSlice of Slicer's driver and one of another driver, both
// for node, and returns their names: ours, theirs.
func publishSlices(node string) (string, string) {
	ours, theirs := driverSlice("slicer-"+node, migdra.DriverName, node), driverSlice("other-"+node, "gpu.example.com", node)
	Expect(admin.Create(ctx, ours)).To(Succeed())
	Expect(admin.Create(ctx, theirs)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(admin.Delete(ctx, theirs))).To(Succeed())
		Expect(client.IgnoreNotFound(admin.Delete(ctx, ours))).To(Succeed())
	})
	return ours.Name, theirs.Name
}

var _ = Describe("DRA frontend", Ordered, func() {
	const node = "dra-node-1"
	BeforeAll(func() {
		Expect(framework.CreateNode(ctx, admin, builder.Node(node).Label(slicerv1alpha1.LabelGPUModel, "H100-80GB").Ready().Obj())).To(Succeed())
	})
	AfterAll(func() {
		Expect(client.IgnoreNotFound(admin.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))).To(Succeed())
	})

	It("runs no scheduler and no webhook, installs one DeviceClass per profile of the nodes' GPUs, follows the models, and switches back", func() {
		defer cleanSlate()
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())

		s := waitAvailable(ns)
		for _, t := range []string{slicerv1alpha1.ConditionSchedulerAvailable, slicerv1alpha1.ConditionWebhookAvailable} {
			Expect(condition(s, t).Reason).To(Equal(slicerv1alpha1.ReasonNotUsed), t)
		}
		dc := condition(s, slicerv1alpha1.ConditionDeviceClassesReady)
		Expect(dc.Status).To(Equal(metav1.ConditionTrue), dc.Message)
		Expect(dc.Message).To(ContainSubstring("H100-80GB"))
		Eventually(deviceClassNames).Should(Equal(classesOf("H100-80GB")))
		var c resourceapi.DeviceClass
		Expect(admin.Get(ctx, client.ObjectKey{Name: migdra.ClassName("3g.40gb")}, &c)).To(Succeed())
		Expect(*c.Spec.ExtendedResourceName).To(Equal("nvidia.com/mig-3g.40gb"))

		By("the summary counts a slice a claim holds as in use (the DRA plugin's NodeAccelerator)")
		na := framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 1).Obj()
		na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{
			{Profile: "3g.40gb", Placement: slicerv1alpha1.Placement{Start: 4, Size: 4}, State: slicerv1alpha1.SliceAllocated, MIGDeviceUUID: "MIG-1",
				Claim: &slicerv1alpha1.ClaimReference{Namespace: "ns", Name: "c", UID: "uid-c", Device: "gpu-0-3g-40gb-at-4"}},
			{Profile: "1g.10gb", Placement: slicerv1alpha1.Placement{Start: 0, Size: 1}, State: slicerv1alpha1.SliceOrphaned, MIGDeviceUUID: "MIG-2"},
		}
		na.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: slicerv1alpha1.ReasonAsExpected, LastTransitionTime: metav1.Now()}}
		Expect(framework.CreateNodeAccelerator(ctx, admin, na)).To(Succeed())
		DeferCleanup(func() {
			Expect(admin.DeleteAllOf(ctx, &slicerv1alpha1.NodeAccelerator{})).To(Succeed())
		})
		Eventually(func(g Gomega) {
			g.Expect(getSlicer(g).Status.Summary).To(Equal(slicerv1alpha1.SlicerSummary{Nodes: 1, ReadyNodes: 1, GPUs: 1, SlicesInUse: 1}))
		}).Should(Succeed())

		By("no scheduler, no webhook, no webhook registration; the agent runs the DRA plugin")
		for _, name := range []string{render.SchedulerName, render.WebhookName} {
			err := admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: name}, &appsv1.Deployment{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Deployment %s: %v", name, err)
		}
		var mwcs admissionregistrationv1.MutatingWebhookConfigurationList
		Expect(admin.List(ctx, &mwcs, client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue})).To(Succeed())
		Expect(mwcs.Items).To(BeEmpty())
		var ds appsv1.DaemonSet
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, &ds)).To(Succeed())
		Expect(ds.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--frontend=dra"))

		By("the node's GPU model changes (its label and its NodeAccelerator): the classes follow")
		setGPUModel(node, "A100-40GB")
		setAcceleratorGPUs(node, framework.MakeNodeAccelerator(node).GPUs("A100-40GB", 1).Obj().Status.GPUs)
		Eventually(deviceClassNames).Should(Equal(classesOf("A100-40GB")))

		By("the agent publishes its node's slices; another driver publishes its own")
		ours, theirs := publishSlices(node)
		agent := fakeDRAAgent(ns, node)

		By("back to the device-plugin frontend: the classes go, the scheduler and webhook come; the slices stay while the DRA agent runs")
		Eventually(func(g Gomega) {
			s := getSlicer(g)
			s.Spec.Frontend = slicerv1alpha1.FrontendDevicePlugin
			g.Expect(admin.Update(ctx, s)).To(Succeed())
		}).Should(Succeed())
		s = waitAvailable(ns)
		// the reconcile that wrote this status ran the slice cleanup with the DRA agent's pod there
		Expect(condition(s, slicerv1alpha1.ConditionDeviceClassesReady)).To(BeNil())
		Expect(sliceNames(Default)).To(ConsistOf(ours, theirs))
		Eventually(deviceClassNames).Should(BeEmpty())
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: render.SchedulerName}, &appsv1.Deployment{})).To(Succeed())

		By("the DRA agent's pod is gone: Slicer's slices go, the other driver's stay")
		Expect(admin.Delete(ctx, agent, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(sliceNames).Should(ConsistOf(theirs))
		setGPUModel(node, "H100-80GB")
	})

	It("installs the classes of every GPU model the NodeAccelerators report, not only the node label's", func() {
		defer cleanSlate()
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())
		waitAvailable(ns)
		Eventually(deviceClassNames).Should(Equal(classesOf("H100-80GB")))

		By("the node, labelled H100-80GB, also holds an A100-40GB: the classes of both models' profiles")
		na := framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 1).GPUs("A100-40GB", 1).Obj()
		Expect(framework.CreateNodeAccelerator(ctx, admin, na)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, na))).To(Succeed()) })
		both := append(classesOf("H100-80GB"), classesOf("A100-40GB")...)
		slices.Sort(both)
		both = slices.Compact(both)
		Expect(both).NotTo(Equal(classesOf("H100-80GB")), "the A100-40GB has profiles the H100-80GB lacks")
		Eventually(deviceClassNames).Should(Equal(both))
		Eventually(func(g Gomega) {
			dc := condition(getSlicer(g), slicerv1alpha1.ConditionDeviceClassesReady)
			g.Expect(dc).NotTo(BeNil())
			g.Expect(dc.Message).To(And(ContainSubstring("A100-40GB"), ContainSubstring("H100-80GB")))
		}).Should(Succeed())

		By("the A100 is gone from the NodeAccelerator: the classes only it offered go")
		setAcceleratorGPUs(node, framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 1).Obj().Status.GPUs)
		Eventually(deviceClassNames).Should(Equal(classesOf("H100-80GB")))
	})

	It("deletes its DeviceClasses and its driver's ResourceSlices on uninstall once the agent is gone", func() {
		defer cleanSlate()
		ns := nextAgentNamespace()
		// long enough that the cleanup waits for the agent rather than giving up
		op := startOperator(operatorOptions{agentNamespace: ns, slicerPatch: func(r *controller.SlicerReconciler) { r.DeletionTimeout = 5 * time.Minute }})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())
		waitAvailable(ns)
		Eventually(deviceClassNames).ShouldNot(BeEmpty())
		ours, theirs := publishSlices(node)
		agent := fakeDRAAgent(ns, node)
		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())

		By("the agent's DaemonSet goes; the classes, the slices and the Slicer stay while the agent's pod is there (no garbage collector here): the teardown waits for the agents before the rest")
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, &appsv1.DaemonSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "agent DaemonSet: %v", err)
		}).Should(Succeed())
		Consistently(deviceClassNames, 2*time.Second).ShouldNot(BeEmpty())
		Expect(admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})).To(Succeed())
		Expect(sliceNames(Default)).To(ConsistOf(ours, theirs))

		By("the agent's pod is gone: the classes and Slicer's slices go, the other driver's stay, the Slicer goes")
		Expect(admin.Delete(ctx, agent, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).Should(Succeed())
		Expect(sliceNames(Default)).To(ConsistOf(theirs))
		Expect(deviceClassNames(Default)).To(BeEmpty())
	})
	// Issue 28 item 5 in the DRA frontend: a pod holds MIG slices through claims Slicer's
	// driver allocated. The uninstall waits for it, naming it; forced, it removes the
	// DeviceClasses first (the stock scheduler allocates no new slice without them), then
	// deletes the pod, and goes on once the claim is released.
	It("waits for a pod holding its driver's claims on uninstall, naming it; forced, removes the DeviceClasses, then the pod", func() {
		defer cleanSlate()
		const tenant = "dra-tenant"
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())
		waitAvailable(ns)
		Eventually(deviceClassNames).ShouldNot(BeEmpty())
		createNamespace(tenant)
		pod := builder.Pod(tenant, "infer").Container("c", builder.None).Obj()
		Expect(admin.Create(ctx, pod)).To(Succeed())
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "infer-mig"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: migdra.ClassName("1g.10gb")}}}}}}
		Expect(admin.Create(ctx, claim)).To(Succeed())
		// What the stock scheduler writes when it allocates the claim and reserves it for the pod.
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "mig", Driver: migdra.DriverName, Pool: node, Device: "gpu-0-1g-10gb-0"}}}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		Expect(admin.Status().Update(ctx, claim)).To(Succeed())

		Expect(admin.Delete(ctx, newSlicer())).To(Succeed())
		By("Wait (the default): the condition names the pod, nothing is removed")
		Eventually(func(g Gomega) {
			c := condition(getSlicer(g), slicerv1alpha1.ConditionSlicesReleased)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonWaitingForPods))
			g.Expect(c.Message).To(ContainSubstring("1 pods hold MIG slices: " + tenant + "/infer"))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(deviceClassNames(g)).NotTo(BeEmpty())
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})).To(Succeed())
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, &appsv1.DaemonSet{})).To(Succeed())
		}, 3*time.Second, 300*time.Millisecond).Should(Succeed())

		By("Force: the DeviceClasses go, then the pod")
		s := getSlicer(Default)
		s.Spec.Uninstall.Policy = slicerv1alpha1.UninstallForce
		Expect(admin.Update(ctx, s)).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pod: %v", err)
		}).Should(Succeed())
		Expect(deviceClassNames(Default)).To(BeEmpty(), "the classes go before the pod")
		Expect(admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})).To(Succeed(),
			"the claim is still reserved for the pod: the kubelet has not unprepared it")

		By("the claim controller's part (no kube-controller-manager here): the claim is released; the teardown runs to the end")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		claim.Status.ReservedFor = nil
		Expect(admin.Status().Update(ctx, claim)).To(Succeed())
		Expect(admin.Delete(ctx, claim)).To(Succeed())
		Eventually(func(g Gomega) {
			err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}, time.Minute).Should(Succeed())
	})
})

// An apiserver with partitionable devices off would drop the counters that keep MIG
// placements apart: DRA mode refuses, says why, and installs no DeviceClass.
var _ = Describe("DRA frontend without partitionable devices", Ordered, func() {
	ownControlPlane(framework.Options{APIServerArgs: map[string]string{"feature-gates": "DRAPartitionableDevices=false"}}, func() {
		Expect(framework.CreateNode(ctx, admin, builder.Node("dra-node-2").Label(slicerv1alpha1.LabelGPUModel, "H100-80GB").Ready().Obj())).To(Succeed())
	})

	It("is not Available, with PartitionableDevicesOff and what to do", func() {
		defer cleanSlate()
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer(draSlicer))).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, ns)
			g.Expect(err).NotTo(HaveOccurred())
			s := getSlicer(g)
			dc := condition(s, slicerv1alpha1.ConditionDeviceClassesReady)
			g.Expect(dc).NotTo(BeNil())
			g.Expect(dc.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(dc.Reason).To(Equal(slicerv1alpha1.ReasonPartitionableDevicesOff))
			g.Expect(dc.Message).To(And(ContainSubstring("DRAPartitionableDevices"), ContainSubstring("spec.frontend to DevicePlugin")))
			av := condition(s, slicerv1alpha1.ConditionAvailable)
			g.Expect(av.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(av.Reason).To(Equal(slicerv1alpha1.ReasonPartitionableDevicesOff))
			g.Expect(condition(s, slicerv1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(s, slicerv1alpha1.ConditionAgentAvailable).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Expect(deviceClassNames(Default)).To(BeEmpty())
	})
})
