package scheduler_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
)

// A scheduler restart between a plan's evictions and its replacements (scheduler/plugin/
// defrag_record.go): the room held for the replacement is the last free room of the cluster,
// and a pod that would take it arrives before the replacement, after the restart.
var _ = Describe("Defragmentation across a scheduler restart", func() {
	It("rebuilds the room held for a moved pod's replacement from the plan recorded on the pending pod", func() {
		s := newScenario("defrag-restart")
		kctx, stopKubelet := context.WithCancel(ctx)
		evict := func(o *config.Options) {
			o.Defragmentation = &slicerv1alpha1.DefragmentationSpec{Mode: slicerv1alpha1.DefragmentationEvict}
		}
		r := startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
		fakeKubelet(kctx, s.ns, 0, 0)
		DeferCleanup(func() {
			if r != nil {
				r.stop()
			}
			stopKubelet()
			checkInvariants()
			s.cleanup()
			checkInvariants()
		})

		rsRef := createWebReplicaSet(s.ns, 1)
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

		By("n2 full but for 1g.10gb @6 (an unmovable pod), n1 blocked for 7g.80gb by the one replica")
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

		By("the plan is recorded on the pending pod and web-1 evicted; then the scheduler stops")
		big := s.create(s.pod("big", map[string]int64{"7g.80gb": 1}))
		Eventually(func() *corev1.PodCondition {
			return podCondition(s.get(big.Name), slicerv1alpha1.PodConditionDefragmentationPlan)
		}, 30*time.Second).ShouldNot(BeNil())
		Expect(podCondition(s.get(big.Name), slicerv1alpha1.PodConditionDefragmentationPlan).Message).To(
			ContainSubstring(fmt.Sprintf(`"pod":"%s/web-1"`, s.ns)))
		Eventually(func() []string {
			var left []string
			for _, p := range s.pods() {
				if p.Name == "web-1" {
					left = append(left, p.Name)
				}
			}
			return left
		}, 30*time.Second).Should(BeEmpty(), "web-1 evicted and gone")
		r.stop()
		r = nil

		By("a fresh scheduler holds the room at n2 @6 again, before any pod is placed")
		r = startSchedulerWith(ctx, plugin.Options{}, timeout, evict)
		rival := s.create(s.pod("rival", map[string]int64{"1g.10gb": 1}))
		Eventually(r.plugin.Cache().ReservationCount, 30*time.Second).Should(Equal(1), "the room held for web-1's replacement")
		Eventually(func() string {
			p := s.get(rival.Name)
			return fmt.Sprintf("node=%q conds=%+v", p.Spec.NodeName, p.Status.Conditions)
		}, 30*time.Second).Should(ContainSubstring("Unschedulable"))
		Consistently(func() string { return s.get(rival.Name).Spec.NodeName }, 3*time.Second).Should(BeEmpty(),
			"the room held for web-1's replacement is not given to another pod")

		By("the replacement takes the held room, the 7g.80gb pod the room opened; the rival waits")
		replica("web-2")
		on("web-2", n2)
		on(big.Name, n1)
		Expect(s.allocationsOf(s.get(big.Name))).To(HaveLen(1))
		Expect(s.allocationsOf(s.get(big.Name))[0].Spec.Placement.Start).To(BeEquivalentTo(0))
		Expect(s.allocationsOf(s.get("web-2"))[0].Spec.Placement.Start).To(BeEquivalentTo(6))
		Expect(s.get(rival.Name).Spec.NodeName).To(BeEmpty())
	})
})
