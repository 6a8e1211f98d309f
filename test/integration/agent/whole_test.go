package agent_test

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/test/framework"
)

// allocateWhole creates a whole-GPU allocation of GPU gpu for a new pod bound to the node, as
// the scheduler's PreBind does (spec.wholeGPU, no profile nor placement).
func (n *node) allocateWhole(gpu int) *slicerv1alpha1.SliceAllocation {
	a := n.build(gpu, "1g.10gb", 0, 1)
	a.Spec.WholeGPU, a.Spec.Profile, a.Spec.Placement = true, "", nil
	return n.create(a, true)
}

// The agent serves whole GPUs (device-plugin/agent/whole.go): through the apiserver and its
// CEL rules, on the emulated NVML, a GPU is handed out whole only with MIG mode off and goes
// back to slices once no pod has it.
var _ = Describe("Whole GPUs", func() {
	It("switches a MIG H100 out of MIG mode for a whole-GPU allocation, serves it whole, and slices it again once its pod lets go", func() {
		n := newNode("n-whole", mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{{Model: slicerv1alpha1.GPUModel(mig.H100_80GB.String()), Mode: slicerv1alpha1.GPUModePolicyDynamic}}
		n.start()
		slice := n.allocateFirst(1, mig.H100_80GB)
		w := n.allocateWhole(0)
		got := n.waitReady(w)
		Expect(got.Status.MIGDeviceUUID).To(BeEmpty())
		Expect(got.Status.GPUInstanceID).To(BeNil())
		Expect(got.Status.Message).To(ContainSubstring("ready whole"))
		n.waitReady(slice)
		cur, pend := n.migModeOf(0)
		Expect([]nvml.MIGMode{cur, pend}).To(Equal([]nvml.MIGMode{nvml.MIGDisabled, nvml.MIGDisabled}), "the whole GPU's MIG mode")
		cur, _ = n.migModeOf(1)
		Expect(cur).To(Equal(nvml.MIGEnabled), "the sliced GPU's MIG mode")

		// Advertised as NVIDIA's whole-GPU resource under the GPU's UUID, beside the slice.
		Eventually(n.adv.IDs).Should(HaveKeyWithValue(n.gpu(0), migapi.NVIDIAGPUResource))
		Expect(n.adv.IDs()).To(HaveKeyWithValue(framework.DeviceIDOf(slice), mig.H100_80GB.Profiles()[0].ResourceName()))
		Expect(n.adv.Health()[n.gpu(0)]).To(BeTrue())
		w8 := &cdi.Writer{Dir: n.cdiDir}
		Expect(cdi.Validate(w8.Path(n.gpu(0)))).To(Succeed())
		spec, err := os.ReadFile(w8.Path(n.gpu(0)))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(spec)).To(ContainSubstring(cdi.EnvVisibleDevices + "=" + n.gpu(0)))
		n.waitGPU(0, func(g Gomega, gs slicerv1alpha1.GPUStatus) { expectWhole(g, gs) })

		// Released while the kubelet still lists the GPU as the pod's: it waits, the GPU stays whole.
		n.usage.Set(map[string]string{n.gpu(0): "team-a/" + w.Spec.PodName})
		n.release(w)
		Eventually(func(g Gomega) {
			var a slicerv1alpha1.SliceAllocation
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(w), &a)).To(Succeed())
			g.Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationReleasing))
			g.Expect(a.Status.Reason).To(Equal(slicerv1alpha1.ReasonInUse))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		next := n.allocateFirst(0, mig.H100_80GB)
		Consistently(func() nvml.MIGMode { c, _ := n.migModeOf(0); return c }).WithTimeout(2 * time.Second).Should(Equal(nvml.MIGDisabled))
		Expect(n.get(next).Status.State).NotTo(Equal(slicerv1alpha1.AllocationReady))

		// The pod lets go: the allocation goes, the device with it, and the GPU is sliced again.
		n.usage.Set(nil)
		n.waitGone(w)
		n.waitReady(next)
		cur, _ = n.migModeOf(0)
		Expect(cur).To(Equal(nvml.MIGEnabled))
		Eventually(n.adv.IDs).ShouldNot(HaveKey(n.gpu(0)))
		Eventually(func() bool { _, err := os.Stat(w8.Path(n.gpu(0))); return os.IsNotExist(err) }).Should(BeTrue(), "the whole GPU's CDI spec is removed")
	})

	It("fails a whole-GPU allocation on a MIG GPU its policy keeps in MIG mode, with a reason to act on", func() {
		n := newNode("n-whole-fixed", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{{Model: slicerv1alpha1.GPUModel(mig.H100_80GB.String()), Mode: slicerv1alpha1.GPUModePolicyMIG}}
		n.start()
		w := n.allocateWhole(0)
		Eventually(func(g Gomega) {
			a := n.get(w)
			g.Expect(a.Status.State).To(Equal(slicerv1alpha1.AllocationFailed))
			g.Expect(a.Status.Reason).To(Equal(slicerv1alpha1.ReasonMIGModeOn))
			g.Expect(a.Status.Message).To(ContainSubstring("spec.gpuModes"))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		cur, _ := n.migModeOf(0)
		Expect(cur).To(Equal(nvml.MIGEnabled))
		Expect(n.adv.IDs()).NotTo(HaveKey(n.gpu(0)))
	})
})
