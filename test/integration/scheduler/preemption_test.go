package scheduler_test

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// Priority classes of the preemption specs (cluster-scoped, created once).
const (
	prioLow  = "it-slicer-low"
	prioMid  = "it-slicer-mid"
	prioHigh = "it-slicer-high"
	// prioNever is prioHigh's value with preemptionPolicy: Never.
	prioNever = "it-slicer-high-never"
)

func ensurePriorityClasses() {
	GinkgoHelper()
	for name, v := range map[string]int32{prioLow: 10, prioMid: 100, prioHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if err := k8s.Create(ctx, pc); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	never := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: prioNever}, Value: 1000,
		PreemptionPolicy: ptr.To(corev1.PreemptNever)}
	if err := k8s.Create(ctx, never); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// withPriority sets the pod's PriorityClass; the apiserver's Priority admission fills in the value.
func withPriority(p *corev1.Pod, class string) *corev1.Pod {
	p.Spec.PriorityClassName = class
	return p
}

// fakeKubelet finishes the graceful deletion of the namespace's pods once they have been
// terminating for delay, at most one every interval when interval > 0 (there is no kubelet: a
// bound pod deleted gracefully stays terminating otherwise). It stops with ctx.
func fakeKubelet(c context.Context, ns string, delay, interval time.Duration) {
	go func() {
		defer GinkgoRecover()
		seen := map[string]time.Time{} // pod UID -> first seen terminating
		var last time.Time
		for c.Err() == nil {
			var list corev1.PodList
			if err := k8s.List(c, &list, client.InNamespace(ns)); err == nil {
				for i := range list.Items {
					p := &list.Items[i]
					if p.DeletionTimestamp == nil {
						continue
					}
					first, ok := seen[string(p.UID)]
					if !ok {
						first = time.Now()
						seen[string(p.UID)] = first
					}
					if time.Since(first) >= delay && time.Since(last) >= interval {
						_ = k8s.Delete(c, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
						last = time.Now()
					}
				}
			}
			select {
			case <-c.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

var _ = Describe("Preempting for MIG slices", func() {
	var (
		s    *scenario
		r    *running
		cnt  int
		stop context.CancelFunc
	)
	BeforeEach(func() {
		ensurePriorityClasses()
		cnt++
		s = newScenario(fmt.Sprintf("preempt-%d", cnt))
	})
	AfterEach(func() {
		cur := r
		r = nil
		if cur != nil {
			DeferCleanup(cur.stop)
		}
		if stop != nil {
			DeferCleanup(stop)
		}
		checkInvariants()
		s.cleanup()
		checkInvariants()
	})

	// fill binds seven low-priority 1g.10gb pods on the pool's one H100 and returns them by
	// placement start.
	fill := func() map[int]string {
		GinkgoHelper()
		for i := 0; i < 7; i++ {
			s.create(withPriority(s.pod(fmt.Sprintf("low-%d", i), map[string]int64{"1g.10gb": 1}), prioLow))
		}
		Eventually(s.bound).Should(Equal(7))
		byStart := map[int]string{}
		Eventually(func() int { return len(s.allocations()) }).Should(Equal(7))
		for _, a := range s.allocations() {
			byStart[int(a.Spec.Placement.Start)] = a.Spec.PodName
		}
		return byStart
	}
	remaining := func() []string {
		var out []string
		for _, p := range s.pods() {
			if p.DeletionTimestamp == nil && p.Spec.PriorityClassName == prioLow && p.Spec.NodeName != "" {
				out = append(out, p.Name)
			}
		}
		sort.Strings(out)
		return out
	}
	startAll := func(kubeletDelay, interval time.Duration) {
		r = startScheduler(ctx, plugin.Options{}, timeout)
		var c context.Context
		c, stop = context.WithCancel(ctx)
		fakeKubelet(c, s.ns, kubeletDelay, interval)
	}

	It("evicts the fewest pods of lower priority, and the preemptor lands on the cleared placement", func() {
		node := s.ns + "-n1"
		s.addNode(node, 1)
		startAll(0, 0)
		byStart := fill()
		high := s.create(withPriority(s.pod("high", map[string]int64{"3g.40gb": 1}), prioHigh))
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }).Should(Equal(node))
		By("three 1g.10gb pods went (at 4, 5 and 6), not four or seven")
		Expect(remaining()).To(ConsistOf(byStart[0], byStart[1], byStart[2], byStart[3]))
		Eventually(func() []slicerv1alpha1.SliceAllocation { return s.allocationsOf(s.get(high.Name)) }).Should(HaveLen(1))
		Expect(s.allocationsOf(s.get(high.Name))[0].Spec.Placement.Start).To(BeEquivalentTo(4))
	})

	It("empties a GPU for a whole-GPU pod by the fewest pods of lower priority, and the pod takes it whole", func() {
		// Two H100s Slicer may switch (policy Dynamic), in MIG mode: one gets a 7g.80gb pod, the
		// other two 1g.10gb pods, all of low priority. The 7g.80gb pod is the oldest, so that
		// DefaultPreemption, which gives victims back the most important (oldest) first, would
		// evict the two 1g.10gb pods instead.
		node := s.ns + "-n1"
		Expect(framework.CreateNode(ctx, k8s, builder.Node(node).Label(poolLabel, s.pool).Ready().Obj())).To(Succeed())
		na := framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 2).Obj()
		for i := range na.Status.GPUs {
			na.Status.GPUs[i].ModePolicy = slicerv1alpha1.GPUModePolicyDynamic
		}
		Expect(framework.CreateNodeAccelerator(ctx, k8s, na)).To(Succeed())
		s.nodes = append(s.nodes, node)
		startAll(0, 0)
		for i, prof := range []string{"7g.80gb", "1g.10gb", "1g.10gb"} {
			s.create(withPriority(s.pod(fmt.Sprintf("low-%d", i), map[string]int64{prof: 1}), prioLow))
			Eventually(s.bound).Should(Equal(i + 1))
		}
		gpuOf := map[string]string{}
		for _, a := range s.allocations() {
			gpuOf[a.Spec.PodName] = a.Spec.GPUUUID
		}
		Expect(gpuOf["low-1"]).To(Equal(gpuOf["low-2"]), "the two 1g.10gb pods share a GPU")
		Expect(gpuOf["low-0"]).NotTo(Equal(gpuOf["low-1"]))

		high := s.create(withPriority(builder.Pod(s.ns, "high").Scheduler(config.DefaultSchedulerName).NodeSelector(poolLabel, s.pool).
			Container("c", builder.Both("nvidia.com/gpu", "1")).Obj(), prioHigh))
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }).Should(Equal(node))
		By("the one 7g.80gb pod went, not the two 1g.10gb pods")
		Expect(remaining()).To(ConsistOf("low-1", "low-2"))
		Eventually(func() []slicerv1alpha1.SliceAllocation { return s.allocationsOf(s.get(high.Name)) }).Should(HaveLen(1))
		a := s.allocationsOf(s.get(high.Name))[0]
		Expect(a.Spec.WholeGPU).To(BeTrue())
		Expect(a.Spec.GPUUUID).To(Equal(gpuOf["low-0"]), "the whole GPU is the one emptied")
	})

	It("keeps a nominated pod's cleared placement against a stream of lower-priority pods", func() {
		node := s.ns + "-n1"
		s.addNode(node, 1)
		// The victims terminate one by one: each frees a slot that fits a 1g.10gb while the
		// 7g.80gb still does not fit, and the pending pods of lower priority are retried on it.
		startAll(2*time.Second, time.Second)
		fill()
		high := s.create(withPriority(s.pod("high", map[string]int64{"7g.80gb": 1}), prioHigh))
		Eventually(func() string { return s.get(high.Name).Status.NominatedNodeName }).Should(Equal(node))
		By("the preemptor's reason says what it waits for")
		Eventually(func() string { return unschedulable(s.get(high.Name)) }).Should(MatchRegexp("preemption: .*waiting .*to terminate"))
		By("lower-priority pods keep arriving while the victims terminate")
		for i := 0; i < 6; i++ {
			s.create(withPriority(s.pod(fmt.Sprintf("mid-%d", i), map[string]int64{"1g.10gb": 1}), prioMid))
			time.Sleep(300 * time.Millisecond)
		}
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }, 60*time.Second).Should(Equal(node))
		Expect(s.allocationsOf(s.get(high.Name))).To(HaveLen(1))
		// None was placed there, not even for a while: a pod placed and preempted again would
		// be gone or terminating.
		mids := 0
		for _, p := range s.pods() {
			if p.Spec.PriorityClassName == prioMid {
				mids++
				Expect(p.Spec.NodeName).To(BeEmpty(), "pod %s took room cleared for the nominated pod", p.Name)
				Expect(p.DeletionTimestamp).To(BeNil(), "pod %s was placed, then preempted", p.Name)
			}
		}
		Expect(mids).To(Equal(6), "pods of lower priority were placed on the cleared room, then preempted")
		Expect(remaining()).To(BeEmpty())
	})

	// The cause of the CI failure of the spec above (2026-12-01), as a deterministic interleaving:
	// the last victim's slice is released while the nominated pod is being judged, after its
	// Filter refused the node and before its PostFilter. Preemption then finds the room free and
	// nothing to evict; the plugin took that for "the room is free and the pod did not take it",
	// dropped the pod's nomination and the framework's, and the pods of lower priority the
	// release woke took the room before the pod's retry (it is in its cycle, so it is retried after
	// its backoff), then were preempted by it, over and over.
	It("keeps a nominated pod's room when its last victim's slice is released while the pod is judged", func() {
		node := s.ns + "-n1"
		var (
			frozen, released atomic.Bool
			release          = make(chan struct{})
			plug             atomic.Pointer[plugin.Plugin]
			took             atomic.Int32 // pods of lower priority reserved on the node
		)
		empty := func() bool {
			for _, claims := range plug.Load().Cache().Claims(node) {
				if len(claims) > 0 {
					return false
				}
			}
			return true
		}
		hooks := plugin.Hooks{
			AfterReserve: func(_ context.Context, pod *corev1.Pod) error {
				if pod.Namespace == s.ns && pod.Spec.PriorityClassName == prioMid {
					took.Add(1)
				}
				return nil
			},
			// While frozen the snapshot applies no event: the last victim's slice stays.
			BeforeSnapshotEvent: func(client.Object, bool) {
				if frozen.Load() {
					<-release
				}
			},
			// The nominated pod's PostFilter begins (its Filter refused the node): the snapshot
			// catches up now, and the pod is judged on, until the last slice is released.
			Rejected: func(pod *corev1.Pod) {
				if pod.Namespace != s.ns || pod.Name != "high" || !frozen.Load() || released.Swap(true) {
					return
				}
				close(release)
				for deadline := time.Now().Add(20 * time.Second); !empty() && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
				}
			},
		}
		s.addNode(node, 1)
		r = startScheduler(ctx, plugin.Options{Hooks: hooks, OnStart: func(p *plugin.Plugin) { plug.Store(p) }}, timeout)
		var c context.Context
		c, stop = context.WithCancel(ctx)
		fakeKubelet(c, s.ns, 2*time.Second, time.Second) // the victims go one a second, from 2 s
		fill()
		high := s.create(withPriority(s.pod("high", map[string]int64{"7g.80gb": 1}), prioHigh))
		Eventually(func() string { return s.get(high.Name).Status.NominatedNodeName }).Should(Equal(node))
		for i := 0; i < 6; i++ {
			s.create(withPriority(s.pod(fmt.Sprintf("mid-%d", i), map[string]int64{"1g.10gb": 1}), prioMid))
		}
		lows := func() int { // victims still in the API, terminating or not
			n := 0
			for _, p := range s.pods() {
				if p.Spec.PriorityClassName == prioLow {
					n++
				}
			}
			return n
		}
		By("one victim left: the snapshot is frozen before it goes")
		Eventually(lows, 30*time.Second, 20*time.Millisecond).Should(Equal(1))
		frozen.Store(true)
		Eventually(lows, 30*time.Second).Should(BeZero(), "the last victim is gone from the API")
		By("a node added retries the pending pods; the nominated pod's cycle releases the snapshot")
		s.addNode(s.ns+"-trigger", 0)
		Eventually(released.Load, 30*time.Second).Should(BeTrue())
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }, 60*time.Second).Should(Equal(node))
		Expect(took.Load()).To(BeZero(), "pods of lower priority were reserved on the room cleared for the nominated pod")
		for _, p := range s.pods() {
			if p.Spec.PriorityClassName == prioMid {
				Expect(p.Spec.NodeName).To(BeEmpty(), "pod %s took room cleared for the nominated pod", p.Name)
			}
		}
	})

	It("spares a pod a PodDisruptionBudget protects when another victim will do", func() {
		node := s.ns + "-n1"
		s.addNode(node, 1)
		startAll(0, 0)
		a := s.create(withPriority(s.pod("low-a", map[string]int64{"3g.40gb": 1}), prioLow))
		b := s.create(withPriority(s.pod("low-b", map[string]int64{"3g.40gb": 1}), prioLow))
		Eventually(s.bound).Should(Equal(2))
		// Without a PDB the tie (one victim each, equal priority) goes to the lower UID:
		// protect that one.
		a, b = s.get(a.Name), s.get(b.Name)
		protected, other := a, b
		if b.UID < a.UID {
			protected, other = b, a
		}
		protected.Labels = map[string]string{"protect": "yes"}
		Expect(k8s.Update(ctx, protected)).To(Succeed())
		// No disruption controller runs here: the PDB's status allows no disruption.
		Expect(k8s.Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "protect"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"protect": "yes"}}}})).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "protect"}}))).To(Succeed())
		})
		time.Sleep(time.Second) // the scheduler's PDB informer
		high := s.create(withPriority(s.pod("high", map[string]int64{"3g.40gb": 1}), prioHigh))
		Eventually(func() string { return s.get(high.Name).Spec.NodeName }).Should(Equal(node))
		Expect(remaining()).To(Equal([]string{protected.Name}))
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Pod{}) }).Should(Satisfy(apierrors.IsNotFound))
	})

	It("never preempts for a pod whose preemptionPolicy is Never", func() {
		s.addNode(s.ns+"-n1", 1)
		startAll(0, 0)
		fill()
		// The Priority admission sets preemptionPolicy from the class.
		never := s.create(withPriority(s.pod("never", map[string]int64{"7g.80gb": 1}), prioNever))
		Eventually(func() string { return unschedulable(s.get(never.Name)) }).Should(ContainSubstring("preemptionPolicy is Never"))
		Consistently(remaining, 3*time.Second).Should(HaveLen(7))
		Expect(s.get(never.Name).Spec.NodeName).To(BeEmpty())
	})
})
