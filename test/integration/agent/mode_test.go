package agent_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// Each GPU's mode in the NodeAccelerator status (docs/gpu-modes.md), through the apiserver and
// its CEL rules: a pending switch is written with its reason, and a restarted agent reads the
// modes back from NVML once the switches took effect.
var _ = Describe("GPU mode status", func() {
	It("reports pending MIG mode switches with their reasons, and their end after a restart", func() {
		n := newNode("n-modes", mig.A100_80GB, mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		device := func(i int) nvml.Device {
			d, err := n.backend.Device(i)
			Expect(err).NotTo(HaveOccurred())
			return d
		}
		Expect(n.backend.Init()).To(Succeed())
		activation, err := device(0).SetMIGMode(nvml.MIGDisabled)
		Expect(err).NotTo(HaveOccurred())
		Expect(activation).To(Equal(nvml.ErrorResetRequired))
		Expect(n.backend.HoldGPU(1, true)).To(Succeed())
		activation, err = device(1).SetMIGMode(nvml.MIGDisabled)
		Expect(err).NotTo(HaveOccurred())
		Expect(activation).To(Equal(nvml.ErrorInUse))
		Expect(n.backend.Shutdown()).To(Succeed())

		n.start()
		n.waitCondition(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionFalse, slicerv1alpha1.ReasonAsExpected, nil, func(g Gomega, na *slicerv1alpha1.NodeAccelerator) {
			g.Expect(na.Status.GPUs).To(HaveLen(3))
			for i, reason := range []slicerv1alpha1.GPUModeSwitchReason{slicerv1alpha1.GPUModeSwitchResetRequired, slicerv1alpha1.GPUModeSwitchHeldByClient} {
				gs := na.Status.GPUs[i]
				g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeEnabled), "GPU %d", i)
				g.Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeSwitching), "GPU %d", i)
				g.Expect(gs.ModeSwitch).NotTo(BeNil(), "GPU %d", i)
				g.Expect(gs.ModeSwitch.TargetMode).To(Equal(slicerv1alpha1.GPUModeWhole), "GPU %d", i)
				g.Expect(gs.ModeSwitch.Phase).To(Equal(slicerv1alpha1.GPUModeSwitchPending), "GPU %d", i)
				g.Expect(gs.ModeSwitch.Reason).To(Equal(reason), "GPU %d", i)
				g.Expect(gs.ModeSwitch.LastTransitionTime.IsZero()).To(BeFalse(), "GPU %d", i)
			}
			g.Expect(na.Status.GPUs[2].Mode).To(Equal(slicerv1alpha1.GPUModeMIG))
			g.Expect(na.Status.GPUs[2].ModeSwitch).To(BeNil())
		})

		n.stop()
		Expect(n.backend.Init()).To(Succeed())
		Expect(n.backend.ResetGPU(0)).To(Succeed())
		Expect(n.backend.HoldGPU(1, false)).To(Succeed())
		activation, err = device(1).SetMIGMode(nvml.MIGDisabled)
		Expect(err).NotTo(HaveOccurred())
		Expect(activation).To(Equal(nvml.Success))
		Expect(n.backend.Shutdown()).To(Succeed())
		n.start()
		n.waitCondition(slicerv1alpha1.ConditionMIGDisabled, metav1.ConditionTrue, slicerv1alpha1.ReasonMIGModeOff, []string{"GPU 0, GPU 1:"}, func(g Gomega, na *slicerv1alpha1.NodeAccelerator) {
			for i := range 2 {
				gs := na.Status.GPUs[i]
				g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeDisabled), "GPU %d", i)
				g.Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeWhole), "GPU %d", i)
				g.Expect(gs.ModeSwitch).To(BeNil(), "GPU %d", i)
			}
		})
		n.invariants()
	})
})
