package agent_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// waitGPU waits until GPU i of the node's NodeAccelerator passes check.
func (n *node) waitGPU(i int, check func(g Gomega, gs slicerv1alpha1.GPUStatus)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		na := n.nodeAccelerator(g)
		g.Expect(len(na.Status.GPUs)).To(BeNumerically(">", i))
		check(g, na.Status.GPUs[i])
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// migModeOf is GPU i's current and pending MIG mode, as the emulated NVML has it.
func (n *node) migModeOf(i int) (current, pending nvml.MIGMode) {
	GinkgoHelper()
	d, err := n.backend.Device(i)
	Expect(err).NotTo(HaveOccurred())
	current, pending, err = d.MIGMode()
	Expect(err).NotTo(HaveOccurred())
	return current, pending
}

// allocateFirst allocates the first placement of model m's first profile on GPU gpu.
func (n *node) allocateFirst(gpu int, m mig.Model) *slicerv1alpha1.SliceAllocation {
	p := m.Profiles()[0]
	pl := p.Placements()[0]
	return n.allocate(gpu, p.LegalName(), int32(pl.Start), int32(pl.Size))
}

func expectWhole(g Gomega, gs slicerv1alpha1.GPUStatus) {
	g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeDisabled))
	g.Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeWhole))
	g.Expect(gs.ModeSwitch).To(BeNil())
}

func expectSwitch(g Gomega, gs slicerv1alpha1.GPUStatus, mode, target slicerv1alpha1.GPUMode, phase slicerv1alpha1.GPUModeSwitchPhase, reason slicerv1alpha1.GPUModeSwitchReason) {
	g.Expect(gs.Mode).To(Equal(mode))
	g.Expect(gs.ModeSwitch).NotTo(BeNil())
	g.Expect(gs.ModeSwitch.TargetMode).To(Equal(target))
	g.Expect(gs.ModeSwitch.Phase).To(Equal(phase))
	g.Expect(gs.ModeSwitch.Reason).To(Equal(reason), gs.ModeSwitch.Message)
	g.Expect(gs.ModeSwitch.Message).NotTo(BeEmpty())
}

// The agent switches GPUs' MIG modes by the policies of spec.gpuModes (docs/gpu-modes.md,
// "What the agent does"), through the apiserver and its CEL rules, on the emulated NVML.
var _ = Describe("GPU mode switches", func() {
	whole := func(m mig.Model) slicerv1alpha1.GPUModePolicy {
		return slicerv1alpha1.GPUModePolicy{Model: slicerv1alpha1.GPUModel(m.String()), Mode: slicerv1alpha1.GPUModePolicyWhole}
	}
	dynamic := func(m mig.Model, allowReset bool) slicerv1alpha1.GPUModePolicy {
		return slicerv1alpha1.GPUModePolicy{Model: slicerv1alpha1.GPUModel(m.String()), Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: allowReset}
	}

	It("switches an empty H100 to whole for policy Whole, and a whole H100 to MIG for a slice under Dynamic", func() {
		n := newNodeMIGOff("n-switch", []int{1}, mig.H100_80GB, mig.H100_94GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{whole(mig.H100_80GB), dynamic(mig.H100_94GB, false)}
		n.start()
		n.waitGPU(0, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			expectWhole(g, gs)
			g.Expect(gs.ModePolicy).To(Equal(slicerv1alpha1.GPUModePolicyWhole))
			g.Expect(gs.ResetAllowed).To(BeFalse())
		})
		// Dynamic with no allocation: the GPU keeps the mode it came up with.
		n.waitGPU(1, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			expectWhole(g, gs)
			g.Expect(gs.ModePolicy).To(Equal(slicerv1alpha1.GPUModePolicyDynamic))
		})
		a := n.allocateFirst(1, mig.H100_94GB)
		got := n.waitReady(a)
		Expect(got.Status.MIGDeviceUUID).NotTo(BeEmpty())
		cur, pend := n.migModeOf(1)
		Expect([]nvml.MIGMode{cur, pend}).To(Equal([]nvml.MIGMode{nvml.MIGEnabled, nvml.MIGEnabled}))
		n.waitGPU(1, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			g.Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeMIG))
			g.Expect(gs.ModeSwitch).To(BeNil())
			g.Expect(gs.Slices).To(HaveLen(1))
		})
		// A slice on the Whole GPU is refused, as on any GPU whose MIG mode is off.
		refused := n.allocateFirst(0, mig.H100_80GB)
		Eventually(func(g Gomega) {
			st := n.get(refused).Status
			g.Expect(st.State).To(Equal(slicerv1alpha1.AllocationFailed))
			g.Expect(st.Reason).To(Equal(slicerv1alpha1.ReasonMIGModeOff))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		n.invariants()
	})

	It("reports a switch a client holds Pending HeldByClient, and finishes it once the client lets go", func() {
		n := newNode("n-switch-held", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{whole(mig.H100_80GB)}
		Expect(n.backend.HoldGPU(0, true)).To(Succeed())
		n.start()
		n.waitGPU(0, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeEnabled))
			expectSwitch(g, gs, slicerv1alpha1.GPUModeSwitching, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient)
			g.Expect(gs.ModePolicy).To(Equal(slicerv1alpha1.GPUModePolicyWhole))
		})
		// No slice on a GPU leaving MIG mode.
		a := n.allocateFirst(0, mig.H100_80GB)
		Eventually(func(g Gomega) {
			st := n.get(a).Status
			g.Expect(st.State).To(Equal(slicerv1alpha1.AllocationFailed))
			g.Expect(st.Reason).To(Equal(slicerv1alpha1.ReasonMIGModeOff))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Instances()).To(BeEmpty())
		// The metrics say what the status says.
		Eventually(func(g Gomega) {
			g.Expect(testutil.ToFloat64(n.metrics.ModeSwitch.WithLabelValues("0", "whole", "pending", "held_by_client"))).To(Equal(1.0))
			g.Expect(testutil.ToFloat64(n.metrics.GPUModes.WithLabelValues("switching"))).To(Equal(1.0))
			g.Expect(testutil.ToFloat64(n.metrics.ModeSwitchRequests.WithLabelValues("whole", "held_by_client"))).To(BeNumerically(">=", 1))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		Expect(n.backend.HoldGPU(0, false)).To(Succeed())
		n.waitGPU(0, expectWhole)
		cur, pend := n.migModeOf(0)
		Expect([]nvml.MIGMode{cur, pend}).To(Equal([]nvml.MIGMode{nvml.MIGDisabled, nvml.MIGDisabled}))
		Eventually(func(g Gomega) {
			g.Expect(testutil.CollectAndCount(n.metrics.ModeSwitch)).To(BeZero())
			g.Expect(testutil.ToFloat64(n.metrics.GPUModes.WithLabelValues("whole"))).To(Equal(1.0))
			g.Expect(testutil.ToFloat64(n.metrics.ModeSwitchRequests.WithLabelValues("whole", "done"))).To(Equal(1.0))
			// The status showed it pending, then done: timed once, from the pending switch's
			// lastTransitionTime, though a SetMIGMode call made it current.
			var h dto.Metric
			g.Expect(n.metrics.ModeSwitchDuration.WithLabelValues("whole").(prometheus.Histogram).Write(&h)).To(Succeed())
			g.Expect(h.GetHistogram().GetSampleCount()).To(Equal(uint64(1)))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		n.invariants()
	})

	It("does not switch an A100 whose policy allows no reset, and resets one whose policy does once no client holds it", func() {
		n := newNodeMIGOff("n-switch-ampere", []int{1}, mig.A100_80GB, mig.A100_40GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{whole(mig.A100_80GB), dynamic(mig.A100_40GB, true)}
		Expect(n.backend.HoldGPU(1, true)).To(Succeed()) // as DCGM would
		n.start()
		n.waitGPU(0, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeEnabled))
			expectSwitch(g, gs, slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchFailed, slicerv1alpha1.GPUModeSwitchResetNotAllowed)
			g.Expect(gs.ResetAllowed).To(BeFalse())
		})
		cur, pend := n.migModeOf(0)
		Expect([]nvml.MIGMode{cur, pend}).To(Equal([]nvml.MIGMode{nvml.MIGEnabled, nvml.MIGEnabled}), "SetMIGMode was not called")

		a := n.allocateFirst(1, mig.A100_40GB)
		n.waitGPU(1, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			g.Expect(gs.MIGMode).To(Equal(slicerv1alpha1.MIGModeDisabled))
			expectSwitch(g, gs, slicerv1alpha1.GPUModeSwitching, slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchPending, slicerv1alpha1.GPUModeSwitchHeldByClient)
			g.Expect(gs.ModePolicy).To(Equal(slicerv1alpha1.GPUModePolicyDynamic))
			g.Expect(gs.ResetAllowed).To(BeTrue())
		})
		st := n.get(a).Status
		Expect(st.State).To(Equal(slicerv1alpha1.AllocationPending))
		Expect(st.Reason).To(Equal(agent.ReasonWaitingForModeSwitch))

		// The client lets go: the agent resets the GPU itself (the policy allows it, the GPU
		// is empty), the change takes effect and the slice is made.
		Expect(n.backend.HoldGPU(1, false)).To(Succeed())
		n.waitReady(a)
		n.waitGPU(1, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			g.Expect(gs.Mode).To(Equal(slicerv1alpha1.GPUModeMIG))
			g.Expect(gs.ModeSwitch).To(BeNil())
		})
		Expect(testutil.ToFloat64(n.metrics.ModeSwitchRequests.WithLabelValues("mig", "done"))).To(Equal(1.0))
		n.invariants()
	})

	It("converges after the agent is killed right after it asked for a switch", func() {
		n := newNode("n-switch-crash", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.gpuModes = []slicerv1alpha1.GPUModePolicy{whole(mig.H100_80GB)}
		Expect(n.backend.HoldGPU(0, true)).To(Succeed())
		ks := &framework.KillSwitch{}
		n.cfg = ks.Config(env.Config)
		killed := n.killAt(emulated.OpSetMIGMode, ks)
		n.start()
		Eventually(killed).WithTimeout(30 * time.Second).Should(BeClosed())

		// The restarted process: a new NVML on the state file (the client's hold was the old
		// process's), and an agent that remembers nothing of the switch.
		n.stop()
		n.cfg = nil
		n.newBackend()
		Expect(n.backend.Init()).To(Succeed())
		cur, pend := n.migModeOf(0)
		Expect([]nvml.MIGMode{cur, pend}).To(Equal([]nvml.MIGMode{nvml.MIGEnabled, nvml.MIGDisabled}), "the change is pending at the crash")
		Expect(n.backend.Shutdown()).To(Succeed())
		n.start()
		n.waitGPU(0, func(g Gomega, gs slicerv1alpha1.GPUStatus) {
			expectWhole(g, gs)
			g.Expect(gs.ModePolicy).To(Equal(slicerv1alpha1.GPUModePolicyWhole))
		})
		n.invariants()
	})
})
