package agent_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// podEvent waits for a Warning Event with reason on pod name of team-a whose note contains
// each of notes.
func podEvent(name, reason string, notes ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var evs corev1.EventList
		g.Expect(k8s.List(ctx, &evs, client.InNamespace("team-a"))).To(Succeed())
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				ok := true
				for _, n := range notes {
					ok = ok && strings.Contains(e.Message, n)
				}
				if ok {
					return
				}
			}
		}
		g.Expect(false).To(BeTrue(), "no %s Event on pod %s with %q", reason, name, notes)
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

var _ = Describe("GPU health from NVML events", func() {
	// Issue 41 item 6, on the device-plugin frontend: what an XID takes out, who is told, and
	// what brings it back.
	It("takes a broken GPU's devices out, and one broken instance's, tells their pods and brings them back", func() {
		n := newNode("n-health", mig.H100_80GB, mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		onBroken := n.waitReady(n.allocate(0, "3g.40gb", 4, 4))
		onOther := n.waitReady(n.allocate(1, "1g.10gb", 0, 1))
		neighbour := n.waitReady(n.allocate(1, "2g.20gb", 2, 2))
		idOf := framework.DeviceIDOf
		health := func(g Gomega, id string) bool {
			h, ok := n.adv.Health()[id]
			g.Expect(ok).To(BeTrue(), "device %s is not advertised", id)
			return h
		}

		Eventually(func() int { return n.backend.Calls(emulated.OpRegisterEvents) }).WithTimeout(30*time.Second).Should(BeNumerically(">=", 2), "the health watcher registers both GPUs")
		// An application's fault: nothing changes.
		Expect(n.backend.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 13})).To(Succeed())
		Eventually(func() float64 { return testutil.ToFloat64(n.metrics.XIDs.WithLabelValues("0", "13", "application")) }).WithTimeout(30 * time.Second).Should(Equal(1.0))
		Consistently(func(g Gomega) { g.Expect(health(g, idOf(onBroken))).To(BeTrue()) }).WithTimeout(2 * time.Second).Should(Succeed())

		// GPU 0 falls off the bus; the driver asks for a reset.
		Expect(n.backend.RaiseXID(emulated.XID{GPU: 0, GPUInstance: -1, Code: 79, Action: nvml.RecoveryGPUReset, Unavailable: true})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(health(g, idOf(onBroken))).To(BeFalse(), "the device on the broken GPU is reported unhealthy to the kubelet")
			g.Expect(health(g, idOf(onOther))).To(BeTrue(), "GPU 1's devices stay healthy")
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.GPUs[0].Health).To(Equal(slicerv1alpha1.GPUUnhealthy))
			g.Expect(na.Status.GPUs[0].HealthMessage).To(Or(ContainSubstring("XID 79"), ContainSubstring("reset")))
			g.Expect(na.Status.GPUs[1].Health).To(Equal(slicerv1alpha1.GPUHealthy))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.get(onBroken).Status.State).To(Equal(slicerv1alpha1.AllocationReady), "the pod keeps its slice: nothing is evicted")
		podEvent(onBroken.Spec.PodName, slicerv1alpha1.ReasonGPUUnhealthy, onBroken.Status.MIGDeviceUUID)
		Expect(testutil.ToFloat64(n.metrics.XIDs.WithLabelValues("0", "79", "gpu"))).To(Equal(1.0))
		Expect(testutil.ToFloat64(n.metrics.GPUHealthy.WithLabelValues("0"))).To(Equal(0.0))
		// Nothing new on the broken GPU: an allocation there waits.
		late := n.allocate(0, "1g.10gb", 0, 1)
		Eventually(func(g Gomega) {
			st := n.get(late).Status
			g.Expect(st.State).To(Equal(slicerv1alpha1.AllocationPending))
			g.Expect(st.Reason).To(Equal(slicerv1alpha1.ReasonGPUUnhealthy))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(n.backend.Instances()).To(HaveLen(3))

		// A contained memory error in one instance of GPU 1: that device only.
		var gi int
		for _, in := range n.backend.Instances() {
			if in.MIGUUID == onOther.Status.MIGDeviceUUID {
				gi = in.GPUInstance
			}
		}
		Expect(n.backend.RaiseXID(emulated.XID{GPU: 1, GPUInstance: gi, Code: 94})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(health(g, idOf(onOther))).To(BeFalse())
			g.Expect(health(g, idOf(neighbour))).To(BeTrue(), "the other instance of the GPU stays healthy")
			na := n.nodeAccelerator(g)
			g.Expect(na.Status.GPUs[1].Health).To(Equal(slicerv1alpha1.GPUHealthy))
			var sick []string
			for _, s := range na.Status.GPUs[1].Slices {
				if s.Health == slicerv1alpha1.GPUUnhealthy {
					sick = append(sick, s.MIGDeviceUUID+" "+s.HealthMessage)
				}
			}
			g.Expect(sick).To(ConsistOf(ContainSubstring(onOther.Status.MIGDeviceUUID)))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		podEvent(onOther.Spec.PodName, slicerv1alpha1.ReasonGPUUnhealthy, "XID 94")

		// The instance's pod ends: the instance is destroyed; made again for the next pod, it
		// is a new, healthy one.
		n.release(onOther)
		n.waitGone(onOther)
		again := n.waitReady(n.allocate(1, "1g.10gb", 0, 1))
		Expect(again.Status.MIGDeviceUUID).NotTo(Equal(onOther.Status.MIGDeviceUUID))
		Eventually(func(g Gomega) { g.Expect(health(g, idOf(again))).To(BeTrue()) }).WithTimeout(30 * time.Second).Should(Succeed())

		// GPU 0 is reset: its devices come back, and the waiting allocation is made.
		Expect(n.backend.Recover(0)).To(Succeed())
		n.waitReady(late)
		Eventually(func(g Gomega) {
			g.Expect(health(g, idOf(onBroken))).To(BeTrue())
			g.Expect(n.nodeAccelerator(g).Status.GPUs[0].Health).To(Equal(slicerv1alpha1.GPUHealthy))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		for _, a := range []*slicerv1alpha1.SliceAllocation{onBroken, neighbour, again, late} {
			n.release(a)
			n.waitGone(a)
		}
		n.invariants()
	})
})
