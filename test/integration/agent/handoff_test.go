package agent_test

import (
	"maps"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

// The hand-off from the scheduler to the agent (docs/design/handoff.md), counted in API
// writes: the scheduler creates the allocation with the agent's finalizer, and the agent
// writes its status once, Ready, with no Event.
var _ = Describe("the hand-off's API writes", func() {
	// startCounted starts the node's agent with its API traffic through a counting proxy and
	// returns the proxy once the agent has published its NodeAccelerator. The publish
	// interval is long, so the NodeAccelerator write that shows the new slice (coalesced,
	// publish.go) stays out of the count; urgent NodeAccelerator writes would still show.
	startCounted := func(n *node) *framework.CountingProxy {
		proxy, err := framework.StartCountingProxy(env.Config)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Stop)
		n.metrics = engine.NewMetrics(prometheus.NewRegistry())
		a, err := env.StartAgent(framework.AgentOptions{Node: n.name, Library: n.backend, CDIDir: n.cdiDir, OrphanGrace: n.grace,
			Usage: n.usage, Advertiser: n.adv, Metrics: n.metrics, PodGone: true, Config: proxy.RestConfig(), PublishInterval: time.Hour},
			zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
		Expect(err).NotTo(HaveOccurred())
		n.agent = a
		Eventually(func(g Gomega) {
			g.Expect(framework.NodeConditionStatus(n.nodeAccelerator(g), slicerv1alpha1.ConditionReady)).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		return proxy
	}
	since := func(before, after map[string]int) map[string]int {
		out := maps.Clone(after)
		for k, v := range before {
			if out[k] -= v; out[k] == 0 {
				delete(out, k)
			}
		}
		return out
	}

	It("takes one status patch from the agent between the allocation's create and Ready: no finalizer patch, no Event", func() {
		n := newNode("n-writes", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		proxy := startCounted(n)
		before := proxy.Writes()
		a := n.allocate(0, "3g.40gb", 4, 4) // the scheduler's one write (it does not go through the proxy)
		got := n.waitReady(a)
		Expect(since(before, proxy.Writes())).To(Equal(map[string]int{"PATCH sliceallocations/status": 1}),
			"the agent's writes from the allocation's create to its Ready")
		Expect(got.Finalizers).To(Equal([]string{slicerv1alpha1.AllocationFinalizer}))
		Expect(got.Status.MIGDeviceUUID).NotTo(BeEmpty())
		n.invariants()
		n.release(a)
		n.waitGone(a)
		n.invariants()
	})

	It("adds the finalizer to an allocation from a v0.1.0 scheduler, and realizes one a v0.1.0 agent left Creating (upgrade)", func() {
		n := newNode("n-upgrade", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		// Left by v0.1.0: an allocation without the finalizer whose agent wrote Creating and
		// stopped before the work.
		left := n.allocateV010(0, "1g.10gb", 0, 1)
		left.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationCreating, Message: "creating the GPU instance and compute instance"}
		Expect(k8s.Status().Update(ctx, left)).To(Succeed())
		proxy := startCounted(n)
		got := n.waitReady(left)
		Expect(got.Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
		Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(Equal(1))

		// A new allocation still from the old scheduler: the agent adds the finalizer (the one
		// extra write of the upgrade path), then the one status patch.
		before := proxy.Writes()
		old := n.allocateV010(0, "1g.10gb", 1, 1)
		got = n.waitReady(old)
		Expect(got.Finalizers).To(ContainElement(slicerv1alpha1.AllocationFinalizer))
		Expect(since(before, proxy.Writes())).To(Equal(map[string]int{"PATCH sliceallocations": 1, "PATCH sliceallocations/status": 1}))
		n.invariants()
		for _, a := range []*slicerv1alpha1.SliceAllocation{left, old} {
			n.release(a)
			n.waitGone(a)
		}
		Expect(n.backend.Instances()).To(BeEmpty())
	})

	It("releases an allocation deleted before any agent saw it: no slice, no hang", func() {
		n := newNode("n-early", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		// The scheduler's Unreserve deletes the allocation while the node's agent is down;
		// the finalizer set at creation keeps it, Terminating, until the agent is back.
		a := n.allocate(0, "1g.10gb", 0, 1)
		n.release(a)
		Expect(n.get(a).DeletionTimestamp).NotTo(BeNil(), "deleted, kept by the finalizer")
		n.start()
		n.waitGone(a)
		Expect(n.backend.Calls(emulated.OpCreateGPUInstance)).To(Equal(0))
		Expect(n.backend.Instances()).To(BeEmpty())
		n.invariants()
	})
})
