package agent_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/device-plugin/nvml/nvidia"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

var _ = Describe("node agent", func() {
	It("publishes its NodeAccelerator, realizes an allocation at its exact placement and releases it", func() {
		n := newNode("n-basic", mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Spec.NodeName).To(Equal(n.name))
			g.Expect(na.Status.Driver).To(Equal(slicerv1alpha1.DriverStateEmulated))
			g.Expect(na.Status.GPUs).To(HaveLen(2))
			g.Expect(na.Status.GPUs[0].Model).To(Equal(slicerv1alpha1.GPUModel("H100-80GB")))
			g.Expect(na.Status.GPUs[0].UUID).To(Equal(n.gpu(0)))
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionReady)).To(Equal(metav1.ConditionTrue))
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionDriverNotReady)).To(Equal(metav1.ConditionFalse))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		a := n.allocate(1, "3g.40gb", 4, 4)
		b := n.allocate(1, "1g.10gb.me", 0, 1)
		got := n.waitReady(a)
		Expect(got.Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
		Expect(got.Status.ActualPlacement).To(BeNil())
		n.waitReady(b)
		ins := n.backend.Instances()
		Expect(ins).To(HaveLen(2))
		Expect(ins[1].GPU).To(Equal(1))
		Expect(ins[1].Profile).To(Equal("3g.40gb"))
		Expect(ins[1].Placement).To(Equal(mig.Placement{Start: 4, Size: 4}))
		Expect(ins[1].MIGUUID).To(Equal(got.Status.MIGDeviceUUID))
		Expect(cdi.Validate((&cdi.Writer{Dir: n.cdiDir}).Path(framework.DeviceIDOf(got)))).To(Succeed())
		Expect(n.adv.IDs()).To(HaveKeyWithValue(framework.DeviceIDOf(got), "slicer.dev/mig-3g.40gb"))
		n.invariants()
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.GPUs).To(HaveLen(2))
			g.Expect(na.Status.GPUs[1].Slices).To(HaveLen(2))
			for _, s := range na.Status.GPUs[1].Slices {
				g.Expect(s.State).To(Equal(slicerv1alpha1.SliceAllocated))
				g.Expect(s.Allocation).NotTo(BeNil())
			}
		}).WithTimeout(30*time.Second).Should(Succeed(), "the NodeAccelerator shows new slices within its publish interval")

		// I6 spirit: with nothing changing, the NodeAccelerator is not rewritten.
		rv := n.nodeAccelerator(Default).ResourceVersion
		Consistently(func() string { return n.nodeAccelerator(Default).ResourceVersion }).WithTimeout(3 * time.Second).Should(Equal(rv))

		n.release(a)
		n.waitGone(a)
		Expect(n.backend.Instances()).To(HaveLen(1))
		n.invariants()
		n.release(b)
		n.waitGone(b)
		Expect(n.backend.Instances()).To(BeEmpty())
		n.invariants()
	})

	It("fails allocations the node cannot realize", func() {
		n := newNode("n-invalid", mig.A100_40GB)
		DeferCleanup(n.cleanup)
		n.start()
		p := n.pod("n-invalid-gpu")
		wrongGPU := framework.MakeSliceAllocation("team-a", "n-invalid-gpu").Node(n.name).GPU("GPU-ffffffff-0000-4000-8000-000000000000").
			Pod(p.Name, string(p.UID)).Obj()
		wrongGPU.Labels = map[string]string{slicerv1alpha1.LabelNode: n.name}
		Expect(k8s.Create(ctx, wrongGPU)).To(Succeed())
		wrongProfile := n.allocate(0, "1g.10gb", 0, 1) // an H100 profile on an A100-40GB
		for a, reason := range map[*slicerv1alpha1.SliceAllocation]string{wrongGPU: slicerv1alpha1.ReasonGPUNotFound, wrongProfile: slicerv1alpha1.ReasonInvalidPlacement} {
			Eventually(func(g Gomega) {
				got := n.get(a)
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationFailed))
				g.Expect(got.Status.Reason).To(Equal(reason))
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}
		Expect(n.backend.Instances()).To(BeEmpty())
		n.release(wrongGPU)
		n.waitGone(wrongGPU)
	})

	It("reports MIGDisabled and fails allocations on a GPU with MIG mode off, never changing the mode", func() {
		n := newNode("n-migoff", mig.H100_80GB, mig.H100_80GB)
		b, err := emulated.New(emulated.Options{Node: n.name, GPUs: n.models, MIGDisabled: []int{1}})
		Expect(err).NotTo(HaveOccurred())
		n.backend = b
		DeferCleanup(n.cleanup)
		n.start()
		off := n.allocate(1, "1g.10gb", 0, 1)
		on := n.allocate(0, "1g.10gb", 0, 1)
		n.waitReady(on)
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionMIGDisabled)).To(Equal(metav1.ConditionTrue))
			g.Expect(na.Status.GPUs).To(HaveLen(2))
			g.Expect(na.Status.GPUs[1].MIGMode).To(Equal(slicerv1alpha1.MIGModeDisabled))
			got := n.get(off)
			g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationFailed))
			g.Expect(got.Status.Reason).To(Equal(slicerv1alpha1.ReasonMIGModeOff))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Instances()).To(HaveLen(1))
		n.release(off)
		n.release(on)
		n.waitGone(off)
		n.waitGone(on)
		n.invariants()
	})

	It("retries a failed destroy until it succeeds", func() {
		n := newNode("n-destroy", mig.H200_141GB)
		DeferCleanup(n.cleanup)
		n.start()
		a := n.allocate(0, "7g.141gb", 0, 8)
		n.waitReady(a)
		n.backend.InjectFault(emulated.OpDestroyGPUInstance, nvml.ErrorUnknown, 2)
		n.release(a)
		n.waitGone(a)
		Expect(n.backend.Instances()).To(BeEmpty())
		Expect(n.backend.Calls(emulated.OpDestroyGPUInstance)).To(BeNumerically(">=", 3))
		n.invariants()
	})

	It("never destroys a slice in use (I11): backs off, emits an Event, destroys once free", func() {
		n := newNode("n-inuse", mig.A100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		a := n.allocate(0, "1g.10gb", 3, 1)
		ready := n.waitReady(a)
		uuid, id := ready.Status.MIGDeviceUUID, framework.DeviceIDOf(ready)
		n.backend.SetInUse(uuid, true)
		n.release(a)
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace("team-a"))).To(Succeed())
			found := false
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == a.Name && e.Reason == slicerv1alpha1.ReasonInUse {
					found = true
				}
			}
			g.Expect(found).To(BeTrue())
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Consistently(func() int { return len(n.backend.Instances()) }).WithTimeout(2 * time.Second).Should(Equal(1))
		Expect(n.get(a).Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
		// A blocked release is visible (SlicerMIGSliceStuck fires on it when it lasts).
		releasingInUse := func(g Gomega) {
			st := n.get(a).Status
			g.Expect(st.State).To(Equal(slicerv1alpha1.AllocationReleasing))
			g.Expect(st.Reason).To(Equal(slicerv1alpha1.ReasonInUse))
		}
		Eventually(releasingInUse).WithTimeout(30 * time.Second).Should(Succeed())

		// The kubelet's view also protects it: a pod still holds the device.
		n.usage.Set(map[string]string{id: "some-pod"})
		n.backend.SetInUse(uuid, false)
		Consistently(func() int { return len(n.backend.Instances()) }).WithTimeout(2 * time.Second).Should(Equal(1))
		Eventually(releasingInUse).WithTimeout(30 * time.Second).Should(Succeed())
		n.usage.Set(nil)
		n.waitGone(a)
		Expect(n.backend.Instances()).To(BeEmpty())
		n.invariants()
	})

	It("re-creates wanted slices after a node reboot and adopts them after an agent restart (I5)", func() {
		n := newNode("n-reboot", mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		a := n.allocate(0, "4g.40gb", 0, 4)
		b := n.allocate(1, "1g.20gb", 6, 2)
		ua, ub := n.waitReady(a).Status.MIGDeviceUUID, n.waitReady(b).Status.MIGDeviceUUID

		// Agent restart: same instances, adopted, nothing created.
		n.stop()
		n.newBackend()
		n.start()
		Consistently(func() int { return n.backend.Calls(emulated.OpCreateGPUInstance) }).WithTimeout(2 * time.Second).Should(Equal(0))
		Expect(n.get(a).Status.MIGDeviceUUID).To(Equal(ua))
		n.invariants()

		// Reboot: NVML comes back empty; allocations are realized again.
		n.stop()
		Expect(n.backend.Reboot()).To(Succeed())
		n.newBackend()
		n.start()
		Eventually(func(g Gomega) {
			for a, old := range map[*slicerv1alpha1.SliceAllocation]string{a: ua, b: ub} {
				got := n.get(a)
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
				g.Expect(got.Status.MIGDeviceUUID).NotTo(Equal(old))
			}
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Instances()).To(HaveLen(2))
		n.invariants()
		n.release(a)
		n.release(b)
		n.waitGone(a)
		n.waitGone(b)
		n.invariants()
	})

	It("reclaims unknown pre-existing instances only after the grace period and only if unused", func() {
		n := newNode("n-orphan", mig.H100_80GB)
		n.grace = 2 * time.Second
		DeferCleanup(n.cleanup)
		Expect(n.backend.Init()).To(Succeed())
		free, err := n.backend.CreateInstance(0, "1g.10gb", 0, false)
		Expect(err).NotTo(HaveOccurred())
		busy, err := n.backend.CreateInstance(0, "1g.10gb", 1, false)
		Expect(err).NotTo(HaveOccurred())
		_, err = n.backend.CreateInstance(0, "2g.20gb", 4, true) // bare GPU instance
		Expect(err).NotTo(HaveOccurred())
		wanted, err := n.backend.CreateInstance(0, "1g.10gb", 6, false)
		Expect(err).NotTo(HaveOccurred())
		n.backend.SetInUse(busy, true)
		a := n.allocate(0, "1g.10gb", 6, 1) // adopts the instance that exists
		start := time.Now()
		n.start()
		Expect(n.waitReady(a).Status.MIGDeviceUUID).To(Equal(wanted))
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.GPUs).To(HaveLen(1))
			states := map[int32]slicerv1alpha1.SliceState{}
			for _, s := range na.Status.GPUs[0].Slices {
				states[s.Placement.Start] = s.State
			}
			g.Expect(states).To(HaveKeyWithValue(int32(0), slicerv1alpha1.SliceOrphaned))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Eventually(func() int { return len(n.backend.Instances()) }).WithTimeout(30 * time.Second).Should(Equal(2))
		Expect(time.Since(start)).To(BeNumerically(">=", n.grace))
		left := n.backend.Instances()
		Expect([]string{left[0].MIGUUID, left[1].MIGUUID}).To(ConsistOf(busy, wanted))
		_ = free
		n.invariants(busy)
	})

	It("refuses every MIG change on a node owned by NVIDIA's MIG manager (I10)", func() {
		n := newNode("n-foreign", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		var node corev1.Node
		Expect(k8s.Get(ctx, client.ObjectKey{Name: n.name}, &node)).To(Succeed())
		node.Labels = map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: "all-1g.10gb"}
		Expect(k8s.Update(ctx, &node)).To(Succeed())
		n.start()
		a := n.allocate(0, "1g.10gb", 0, 1)
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionOwnershipConflict)).To(Equal(metav1.ConditionTrue))
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionReady)).To(Equal(metav1.ConditionFalse))
			got := n.get(a)
			g.Expect(got.Status.Reason).To(Equal(slicerv1alpha1.ReasonForeignMIGManager))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(Equal(0))
		n.release(a)
		n.waitGone(a)
	})

	It("refuses a node where another device plugin advertises nvidia.com/mig-*, and takes it back once that plugin is gone", func() {
		n := newNode("n-foreign-plugin", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		setCapacity := func(q string) {
			var node corev1.Node
			Expect(k8s.Get(ctx, client.ObjectKey{Name: n.name}, &node)).To(Succeed())
			// Both, as the kubelet writes them (the apiserver copies capacity into an unset
			// allocatable once, and never again).
			node.Status.Capacity = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse(q)}
			node.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse(q)}
			Expect(k8s.Status().Update(ctx, &node)).To(Succeed())
		}
		setCapacity("7")
		n.start()
		a := n.allocate(0, "1g.10gb", 0, 1)
		n.waitCondition(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionTrue, slicerv1alpha1.ReasonForeignDevicePlugin,
			[]string{"nvidia.com/mig-1g.10gb", slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin + "=false"},
			func(g Gomega, na *slicerv1alpha1.NodeAccelerator) {
				g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionReady)).To(Equal(metav1.ConditionFalse))
				g.Expect(n.get(a).Status.Reason).To(Equal(slicerv1alpha1.ReasonForeignDevicePlugin))
			})
		Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(Equal(0))

		setCapacity("0") // the kubelet's answer once the other plugin is gone
		n.waitReady(a)
		n.waitCondition(slicerv1alpha1.ConditionOwnershipConflict, metav1.ConditionFalse, "", nil, nil)
		n.release(a)
		n.waitGone(a)
	})

	It("reports a RuntimeClass that selects the node's NVIDIA runtime (RuntimeBypass), and clears it once the class is gone; slices are served meanwhile", func() {
		n := newNode("n-runtime-bypass", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		var node corev1.Node
		Expect(k8s.Get(ctx, client.ObjectKey{Name: n.name}, &node)).To(Succeed())
		// What the kubelet reports of a containerd with NVIDIA's runtime configured.
		node.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: ""}, {Name: "runc"}, {Name: "nvidia"}}
		Expect(k8s.Status().Update(ctx, &node)).To(Succeed())
		class := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia-bypass-test"}, Handler: "nvidia"}
		Expect(k8s.Create(ctx, class)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, class))).To(Succeed()) })
		n.start()
		a := n.allocate(0, "1g.10gb", 0, 1)
		n.waitReady(a)
		n.waitCondition(slicerv1alpha1.ConditionRuntimeBypass, metav1.ConditionTrue, slicerv1alpha1.ReasonNVIDIARuntimeClass,
			[]string{"RuntimeClass nvidia-bypass-test (handler nvidia)"},
			func(g Gomega, na *slicerv1alpha1.NodeAccelerator) {
				g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionReady)).To(Equal(metav1.ConditionTrue), "reported, not acted on")
			})

		Expect(k8s.Delete(ctx, class)).To(Succeed()) // the agent watches RuntimeClasses
		n.waitCondition(slicerv1alpha1.ConditionRuntimeBypass, metav1.ConditionFalse, "",
			[]string{"offers the NVIDIA runtime handler nvidia, and no RuntimeClass selects it"}, nil)
		n.release(a)
		n.waitGone(a)
	})

	It("reports DriverNotReady instead of crashing when NVML is unavailable", func() {
		n := newNode("n-nodriver", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.backend.FailInit(nvml.ErrorLibraryNotFound)
		n.start()
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.Driver).To(Equal(slicerv1alpha1.DriverStateNotReady))
			g.Expect(framework.NodeConditionStatus(na, slicerv1alpha1.ConditionDriverNotReady)).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	It("starts on the real NVML backend without a GPU and reports NVMLUnavailable", func() {
		n := newNode("n-real", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		a, err := env.StartAgent(framework.AgentOptions{Node: n.name, Library: nvidia.New(""), CDIDir: n.cdiDir, OrphanGrace: time.Hour},
			GinkgoLogr)
		Expect(err).NotTo(HaveOccurred())
		n.agent = a
		Eventually(func(g Gomega) {
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.Driver).To(Equal(slicerv1alpha1.DriverStateNotReady))
			c := meta.FindStatusCondition(na.Status.Conditions, slicerv1alpha1.ConditionDriverNotReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(slicerv1alpha1.ReasonNVMLUnavailable))
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})

	// The kubelet may hand a pod another realized slice of its profile: on the same GPU or
	// on another one. The agent records where each pod's slice really is and, when a pod
	// goes, destroys the slice that pod really used.
	DescribeTable("records the slice the kubelet really gave a pod and destroys by actual use",
		func(node string, models []mig.Model, gpuA, startA, gpuB, startB int) {
			n := newNode(node, models...)
			DeferCleanup(n.cleanup)
			n.start()
			a := n.allocate(gpuA, "1g.10gb", int32(startA), 1)
			b := n.allocate(gpuB, "1g.10gb", int32(startB), 1)
			ra, rb := n.waitReady(a), n.waitReady(b)
			ua, ub := ra.Status.MIGDeviceUUID, rb.Status.MIGDeviceUUID
			ida, idb := framework.DeviceIDOf(ra), framework.DeviceIDOf(rb)
			// The kubelet handed a's device to b's pod and b's device to a's pod.
			n.usage.Set(map[string]string{ida: "team-a/" + b.Spec.PodName, idb: "team-a/" + a.Spec.PodName})
			actualGPU := func(real, spec int) string {
				if real == spec {
					return ""
				}
				return n.gpu(real)
			}
			Eventually(func(g Gomega) {
				ga, gb := n.get(a), n.get(b)
				g.Expect(ga.Status.MIGDeviceUUID).To(Equal(ub))
				g.Expect(ga.Status.ActualGPUUUID).To(Equal(actualGPU(gpuB, gpuA)))
				g.Expect(ga.Status.ActualPlacement).To(Equal(&slicerv1alpha1.Placement{Start: int32(startB), Size: 1}))
				g.Expect(gb.Status.MIGDeviceUUID).To(Equal(ua))
				g.Expect(gb.Status.ActualGPUUUID).To(Equal(actualGPU(gpuA, gpuB)))
				g.Expect(gb.Status.ActualPlacement).To(Equal(&slicerv1alpha1.Placement{Start: int32(startA), Size: 1}))
			}).WithTimeout(30 * time.Second).Should(Succeed())
			n.invariants()
			// b's pod goes away: the slice it really used (a's spec slot) is destroyed.
			n.usage.Set(map[string]string{idb: "team-a/" + a.Spec.PodName})
			n.release(b)
			n.waitGone(b)
			left := n.backend.Instances()
			Expect(left).To(HaveLen(1))
			Expect(left[0].MIGUUID).To(Equal(ub))
			Expect(left[0].GPU).To(Equal(gpuB))
			Consistently(func() int { return len(n.backend.Instances()) }).WithTimeout(2 * time.Second).Should(Equal(1))
			n.invariants()
		},
		Entry("on one GPU", "n-swap", []mig.Model{mig.H100_80GB}, 0, 0, 0, 1),
		Entry("across GPUs", "n-xgpu", []mig.Model{mig.H100_80GB, mig.H100_80GB}, 0, 0, 1, 0),
	)
})
