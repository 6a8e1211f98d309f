package scheduler_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/framework"
)

// A scheduler restart between a plan's evictions and its replacements (scheduler/plugin/
// defrag_record.go): the room held for a replacement is the last free room of its kind, and a
// pod that would take it arrives before the replacement, after the restart.
var _ = Describe("Defragmentation across a scheduler restart", func() {
	var (
		s           *scenario
		r           *running
		stopKubelet context.CancelFunc
		cnt         int
	)
	evict := func(o *config.Options) {
		o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
	}
	BeforeEach(func() {
		cnt++
		s = newScenario(fmt.Sprintf("defrag-restart-%d", cnt))
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
		stopKubelet = func() {}
	})
	AfterEach(func() {
		if r != nil {
			r.stop()
		}
		stopKubelet()
		checkInvariants()
		s.cleanup()
		checkInvariants()
	})
	kubelet := func() {
		var kctx context.Context
		kctx, stopKubelet = context.WithCancel(ctx)
		fakeKubelet(kctx, s.ns, 0, 0)
	}
	restart := func() {
		GinkgoHelper()
		r.stop()
		r = nil
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
	}
	var rsRef metav1.OwnerReference
	replica := func(name string) *corev1.Pod {
		p := s.pod(name, map[string]int64{"1g.10gb": 1})
		p.Labels = map[string]string{"app": "web"}
		p.OwnerReferences = []metav1.OwnerReference{rsRef}
		return s.create(p)
	}
	on := func(name, node string) {
		GinkgoHelper()
		Eventually(func() string { return s.get(name).Spec.NodeName }, 30*time.Second).Should(Equal(node))
	}
	// oneReplicaBlocks: n2 is full but for 1g.10gb @6 (an unmovable pod), n1 blocked for
	// 7g.80gb by the one replica web-1; the 7g.80gb pod "big" is created, the plan recorded on
	// it and web-1 evicted and gone.
	oneReplicaBlocks := func() *corev1.Pod {
		GinkgoHelper()
		kubelet()
		rsRef = createWebReplicaSet(s.ns, 1)
		s.addNode(s.ns+"-n1", 1)
		s.addNode(s.ns+"-n2", 1)
		n1, n2 := s.nodes[0], s.nodes[1]
		s.cordonSeen(n1, true)
		s.create(s.pod("fill", map[string]int64{"4g.40gb": 1, "2g.20gb": 1}))
		on("fill", n2)
		s.cordonSeen(n1, false)
		s.cordonSeen(n2, true)
		replica("web-1")
		on("web-1", n1)
		s.cordonSeen(n2, false)
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() *corev1.PodCondition {
			return podCondition(s.get(big.Name), slicerv1alpha1.PodConditionDefragmentationPlan)
		}, 30*time.Second).ShouldNot(BeNil())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "web-1"}, &corev1.Pod{}) },
			30*time.Second).Should(MatchError(ContainSubstring("not found")), "web-1 evicted and gone")
		return big
	}
	// heldForTheReplacement checks, after the restart, that a rival 1g.10gb pod is kept off the
	// room held at n2 @6, which web-1's replacement then takes.
	heldForTheReplacement := func() {
		GinkgoHelper()
		rival := s.create(s.pod("rival", map[string]int64{"1g.10gb": 1}))
		Eventually(r.plugin.Cache().ReservationCount, 30*time.Second).Should(Equal(1), "the room held for web-1's replacement")
		Eventually(func() string {
			p := s.get(rival.Name)
			return fmt.Sprintf("node=%q conds=%+v", p.Spec.NodeName, p.Status.Conditions)
		}, 30*time.Second).Should(ContainSubstring("Unschedulable"))
		Consistently(func() string { return s.get(rival.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"the room held for web-1's replacement is not given to another pod")
		replica("web-2")
		on("web-2", s.nodes[1])
		Expect(s.allocationsOf(s.get("web-2"))[0].Spec.Placement.Start).To(BeEquivalentTo(6))
		Expect(s.get(rival.Name).Spec.NodeName).To(BeEmpty())
	}

	It("rebuilds the room held for a moved pod's replacement from the plan recorded on the pending pod", func() {
		big := oneReplicaBlocks()
		restart()
		heldForTheReplacement()
		on(big.Name, s.nodes[0])
		Expect(s.allocationsOf(s.get(big.Name))).To(HaveLen(1))
		Expect(s.allocationsOf(s.get(big.Name))[0].Spec.Placement.Start).To(BeEquivalentTo(0))
	})

	It("rebuilds it when the pending pod bound before the restart", func() {
		big := oneReplicaBlocks()
		on(big.Name, s.nodes[0])
		restart()
		heldForTheReplacement()
	})

	It("rebuilds a repack plan's room that another moved pod's slice still holds, and holds it once that slice is released", func() {
		// TestPlanRepackOrderedExample on one node: GPU 0 full of unmovable pods; on GPU 1 web-1's
		// 1g.20gb at 2 holds the 4g.40gb's memory, "keep" sits at 4, web-2 at 6. The plan moves
		// web-2 to 5 and web-1 into 6-7, where web-2's slice is until it is released.
		rsRef = createWebReplicaSet(s.ns, 2)
		node := s.ns + "-n1"
		s.addNode(node, 2)
		owned := func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{rsRef} }
		web := map[string]string{"app": "web"}
		placeAt(s, s.ns, node, "full-a", "4g.40gb", 0, 0, nil, "", nil)
		placeAt(s, s.ns, node, "full-b", "3g.40gb", 0, 4, nil, "", nil)
		placeAt(s, s.ns, node, "web-1", "1g.20gb", 1, 2, web, "", owned)
		placeAt(s, s.ns, node, "keep", "1g.10gb", 1, 4, nil, "", nil)
		placeAt(s, s.ns, node, "web-2", "1g.10gb", 1, 6, web, "", owned)
		Eventually(func() int { return holders(r, node) }).Should(Equal(5))
		By("the plan is recorded and both replicas evicted; no kubelet finishes them, so their slices stay")
		big := s.create(s.pod("big", map[string]int64{"4g.40gb": 1}))
		Eventually(func() int {
			n := 0
			for _, name := range []string{"web-1", "web-2"} {
				if s.get(name).DeletionTimestamp != nil {
					n++
				}
			}
			return n
		}, 30*time.Second).Should(Equal(2))
		Expect(podCondition(s.get(big.Name), slicerv1alpha1.PodConditionDefragmentationPlan)).NotTo(BeNil())
		restart()
		By("after the restart the replicas finish: web-2's slice at 6 is released, and the room at 6-7 is held at once")
		rival := s.create(s.pod("rival", map[string]int64{"1g.20gb": 1}))
		Eventually(func() string { return unschedulable(s.get(rival.Name)) }, 30*time.Second).ShouldNot(BeEmpty())
		kubelet()
		Eventually(func() []string {
			var names []string
			for _, a := range s.allocations() {
				names = append(names, a.Spec.PodName)
			}
			return names
		}, 30*time.Second).ShouldNot(ContainElement(HavePrefix("web-")), "the replicas' slices are released")
		Consistently(func() string { return s.get(rival.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"a 1g.20gb pod took the room held for web-1's replacement")
		By("the replacements take their rooms, the 4g.40gb pod the room opened")
		for name, profile := range map[string]string{"web-3": "1g.20gb", "web-4": "1g.10gb"} {
			p := s.pod(name, map[string]int64{profile: 1})
			p.Labels = web
			owned(p)
			s.create(p)
		}
		at := func(name string) string {
			as := s.allocationsOf(s.get(name))
			if len(as) != 1 {
				return ""
			}
			return fmt.Sprintf("%s@%d", as[0].Spec.GPUUUID, as[0].Spec.Placement.Start)
		}
		gpu1 := framework.GPUUUID(node, 1)
		Eventually(func() string { return at("web-3") }, 30*time.Second).Should(Equal(gpu1 + "@6"))
		Eventually(func() string { return at("web-4") }, 30*time.Second).Should(Equal(gpu1 + "@5"))
		Eventually(func() string { return at(big.Name) }, 30*time.Second).Should(Equal(gpu1 + "@0"))
		Expect(s.get(rival.Name).Spec.NodeName).To(BeEmpty())
	})
})
