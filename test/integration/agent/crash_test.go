package agent_test

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// killAt arms n's NVML to kill the agent right after the next successful call of op.
// With the emulated NVML dead and the apiserver cut at the same moment (framework.KillSwitch),
// the old agent changes nothing any more; it is stopped, and a new agent on the state file is
// the restarted process.
func (n *node) killAt(op string, ks *framework.KillSwitch) <-chan struct{} {
	killed := make(chan struct{})
	n.backend.CrashAfter(op, 1, func() {
		ks.Dead.Store(true)
		close(killed)
	})
	return killed
}

// restart replaces the killed agent with a new process on the same state file.
func (n *node) restart() {
	n.stop()
	n.cfg = nil
	n.newBackend()
	n.start()
}

var _ = Describe("Agent killed at a crash point", func() {
	// covers RELIABILITY.md N1, N2, N9; docs/design/invariants.md I2, I5.
	DescribeTable("converges after a restart: nothing leaked, the allocation's status says where it is",
		func(op string, onRelease bool, atCrash func(in []emulated.Instance, specs []string, a *slicerv1alpha1.SliceAllocation)) {
			n := newNode("n-crash-"+map[bool]string{false: "c", true: "r"}[onRelease]+"-"+opShort(op), mig.H100_80GB)
			DeferCleanup(n.cleanup)
			ks := &framework.KillSwitch{}
			n.cfg = ks.Config(env.Config)
			var killed <-chan struct{}
			if !onRelease {
				killed = n.killAt(op, ks)
			}
			n.start()
			a := n.allocate(0, "2g.20gb", 2, 2)
			var ready *slicerv1alpha1.SliceAllocation
			if onRelease {
				ready = n.waitReady(a)
				killed = n.killAt(op, ks)
				n.release(a)
			}
			Eventually(killed).WithTimeout(30 * time.Second).Should(BeClosed())
			specs, err := (&cdi.Writer{Dir: n.cdiDir}).List()
			Expect(err).NotTo(HaveOccurred())
			before := n.backend.Instances()
			atCrash(before, specs, n.get(a))

			n.restart()
			if onRelease {
				n.waitGone(a)
				Expect(n.backend.Instances()).To(BeEmpty())
				Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(BeZero(), "the restarted agent creates nothing for a released allocation")
				n.invariants()
				Expect(ready.Status.MIGDeviceUUID).NotTo(BeEmpty())
				return
			}
			got := n.waitReady(a)
			in := n.backend.Instances()
			Expect(in).To(HaveLen(1))
			Expect(in[0].GPUInstance).To(Equal(before[0].GPUInstance), "the instance at the crash is adopted or finished, not replaced")
			Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(BeZero(), "the restarted agent creates no second GPU instance")
			Expect(got.Status.MIGDeviceUUID).To(Equal(in[0].MIGUUID))
			Expect(got.Status.Message).To(ContainSubstring(in[0].MIGUUID))
			_, err = os.Stat((&cdi.Writer{Dir: n.cdiDir}).Path(framework.DeviceIDOf(got)))
			Expect(err).NotTo(HaveOccurred(), "the CDI spec is written after the restart")
			n.invariants()
			n.release(a)
			n.waitGone(a)
			n.invariants()
		},
		Entry("after the GPU instance is created, before its compute instance", emulated.OpCreateGPUInstance, false,
			func(in []emulated.Instance, specs []string, a *slicerv1alpha1.SliceAllocation) {
				Expect(in).To(HaveLen(1))
				Expect(in[0].ComputeInstance).To(Equal(-1), "a bare GPU instance at the crash")
				Expect(specs).To(BeEmpty())
				Expect(a.Status.State).NotTo(Equal(slicerv1alpha1.AllocationReady))
			}),
		Entry("after the compute instance is created, before the CDI spec", emulated.OpCreateComputeInstance, false,
			func(in []emulated.Instance, specs []string, a *slicerv1alpha1.SliceAllocation) {
				Expect(in).To(HaveLen(1))
				Expect(in[0].MIGUUID).NotTo(BeEmpty(), "a complete instance at the crash")
				Expect(specs).To(BeEmpty(), "no CDI spec yet")
				Expect(a.Status.State).NotTo(Equal(slicerv1alpha1.AllocationReady))
			}),
		Entry("after the compute instance is destroyed, before the GPU instance", emulated.OpDestroyComputeInst, true,
			func(in []emulated.Instance, _ []string, a *slicerv1alpha1.SliceAllocation) {
				Expect(in).To(HaveLen(1))
				Expect(in[0].ComputeInstance).To(Equal(-1), "a bare GPU instance at the crash")
				Expect(a.Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
			}),
		Entry("after the GPU instance is destroyed, before the finalizer is removed", emulated.OpDestroyGPUInstance, true,
			func(in []emulated.Instance, _ []string, a *slicerv1alpha1.SliceAllocation) {
				Expect(in).To(BeEmpty())
				Expect(a.Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
			}),
	)
})

// opShort is a node-name-safe token for an operation.
func opShort(op string) string {
	return map[string]string{
		emulated.OpCreateGPUInstance: "gi", emulated.OpCreateComputeInstance: "ci",
		emulated.OpDestroyComputeInst: "dci", emulated.OpDestroyGPUInstance: "dgi",
	}[op]
}
