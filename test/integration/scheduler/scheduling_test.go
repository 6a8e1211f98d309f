package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

const timeout = 30e9 // PreBind's wait for Ready, 30 s

var _ = Describe("Scheduling MIG pods", func() {
	var (
		s   *scenario
		r   *running
		cnt int
	)
	start := func(opts plugin.Options) { r = startScheduler(ctx, opts, timeout) }
	BeforeEach(func() {
		cnt++
		s = newScenario(fmt.Sprintf("sched-%d", cnt))
	})
	AfterEach(func() {
		cur := r
		r = nil
		if cur != nil {
			// Stopped after this AfterEach even when a check below fails: left running, this
			// spec's scheduler would also schedule the next specs' pods.
			DeferCleanup(cur.stop)
		}
		checkInvariants()
		s.cleanup()
		checkInvariants()
		if cur != nil {
			Expect(cur.plugin.Cache().ReservationCount()).To(BeZero(), "no reservation left behind")
			Expect(testutil.ToFloat64(cur.plugin.Metrics().AllocationConflicts)).To(BeZero())
		}
	})

	It("binds exactly as many pods of a burst as fit, the rest Pending with a reason (S1)", func() {
		s.addNode(s.ns+"-n1", 1)
		s.addNode(s.ns+"-n2", 1)
		start(plugin.Options{})
		// Two 3g.40gb fit on an H100: 4 of 10.
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				Expect(k8s.Create(ctx, s.pod(fmt.Sprintf("burst-%d", i), map[string]int64{"3g.40gb": 1}))).To(Succeed())
			}()
		}
		wg.Wait()
		Eventually(func() int {
			n := 0
			for _, p := range s.pods() {
				if p.Spec.NodeName == "" && unschedulable(&p) != "" {
					n++
				}
			}
			return n
		}).Should(Equal(6))
		Eventually(s.bound).Should(Equal(4))
		Expect(s.allocations()).To(HaveLen(4))
		for _, p := range s.pods() {
			if p.Spec.NodeName == "" {
				Expect(unschedulable(&p)).To(ContainSubstring("no GPU has a free slot for 1 × 3g.40gb; closest: node"))
				Expect(unschedulable(&p)).To(ContainSubstring("blocked by pods " + s.ns + "/burst-"))
				expectSlicerReasonLeads(unschedulable(&p))
			}
		}
		checkInvariants()

		By("releasing a slice retries a pending pod, without a timer")
		var victim string
		for _, p := range s.pods() {
			if p.Spec.NodeName != "" {
				victim = p.Name
				break
			}
		}
		Expect(k8s.Delete(ctx, s.get(victim), client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(s.bound).Should(Equal(4))
		Eventually(func() []slicerv1alpha1.SliceAllocation { return s.allocations() }).Should(HaveLen(4))
	})

	It("retries a pending pod when its snapshot learns of a release after the scheduler did (S1, snapshot lag)", func() {
		// The scheduler's informers and the plugin's snapshot informers are
		// separate: the scheduler can retry the pending pod on a release
		// before the snapshot shows it. Force that order: hold the snapshot's
		// allocation deletes until the scheduler has retried the pod and the
		// plugin, on the stale snapshot, has turned it away again.
		s.addNode(s.ns+"-n1", 1)
		var (
			lagging    atomic.Bool
			rejections atomic.Int32
		)
		gate := make(chan struct{})
		var release sync.Once
		open := func() { release.Do(func() { close(gate) }) }
		defer open()
		start(plugin.Options{Hooks: plugin.Hooks{
			BeforeSnapshotEvent: func(obj client.Object, deleted bool) {
				if _, ok := obj.(*slicerv1alpha1.SliceAllocation); ok && deleted && lagging.Load() {
					<-gate
				}
			},
			Rejected: func(pod *corev1.Pod) {
				if pod.Name == "waiting" {
					rejections.Add(1)
				}
			},
		}})
		holder := s.create(s.pod("holder", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return s.get(holder.Name).Spec.NodeName }).ShouldNot(BeEmpty())
		waiting := s.create(s.pod("waiting", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(waiting.Name)) }).Should(ContainSubstring("no GPU has a free slot"))
		Eventually(rejections.Load).Should(BeNumerically(">=", 1))

		lagging.Store(true)
		before := rejections.Load()
		Expect(k8s.Delete(ctx, s.get(holder.Name), client.GracePeriodSeconds(0))).To(Succeed())
		By("the scheduler retries the pod on its own informer's event; the snapshot, held, still shows the GPU full")
		Eventually(rejections.Load).Should(BeNumerically(">", before))
		Expect(s.get(waiting.Name).Spec.NodeName).To(BeEmpty())

		By("the snapshot catches up and retries the pod itself, without a timer")
		open()
		Eventually(func() string { return s.get(waiting.Name).Spec.NodeName }).ShouldNot(BeEmpty())
		Expect(s.allocationsOf(s.get(waiting.Name))).To(HaveLen(1))
	})

	It("keeps the slot of a pod deleted in PreBind until its snapshot shows the allocation (S1, snapshot lag)", func() {
		// PreBind creates the allocation; the pod is deleted before the
		// snapshot's informer shows it (held here), so PreBind fails and
		// Unreserve drops the reservation. The allocation exists in the API:
		// its slot must stay taken, or the waiting pod would be placed on it.
		node := s.ns + "-n1"
		s.addNode(node, 1)
		var holding atomic.Bool
		gate := make(chan struct{})
		var release sync.Once
		open := func() { release.Do(func() { close(gate) }) }
		defer open()
		start(plugin.Options{Hooks: plugin.Hooks{
			BeforeSnapshotEvent: func(obj client.Object, deleted bool) {
				if a, ok := obj.(*slicerv1alpha1.SliceAllocation); ok && !deleted && a.Spec.PodName == "gone" && holding.Load() {
					<-gate
				}
			},
		}})
		holding.Store(true)
		gone := s.create(s.pod("gone", map[string]int64{"7g.80gb": 1}))
		Eventually(func() []slicerv1alpha1.SliceAllocation { return s.allocationsOf(gone) }).Should(HaveLen(1))
		waiting := s.create(s.pod("waiting", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return unschedulable(s.get(waiting.Name)) }).Should(ContainSubstring("no GPU has a free slot"))

		Expect(k8s.Delete(ctx, s.get(gone.Name), client.GracePeriodSeconds(0))).To(Succeed())
		deleted := r.plugin.Metrics().Unreserve.WithLabelValues(plugin.UnreserveDeleted)
		Eventually(func() float64 { return testutil.ToFloat64(deleted) }).Should(Equal(1.0))
		By("the reservation is gone, the allocation not yet in the snapshot: its slot is still taken")
		n := r.plugin.Cache().Node(node)
		Expect(n.MIG.GPUs[0].State.FreeComputeSlices()).To(BeZero())
		Expect(r.plugin.Cache().Holders(node)[n.GPUs[0].UUID]).To(Equal([]string{s.ns + "/gone"}))

		By("the snapshot catches up; the allocation is released and the waiting pod binds")
		open()
		Eventually(func() string { return s.get(waiting.Name).Spec.NodeName }).Should(Equal(node))
		Expect(s.allocationsOf(s.get(waiting.Name))).To(HaveLen(1))
	})

	It("packs mixed profiles where internal/mig places them", func() {
		node := s.ns + "-n1"
		s.addNode(node, 1)
		start(plugin.Options{})
		state := mig.EmptyGPU(mig.H100_80GB)
		fits, full := 0, 0
		for i, prof := range []string{"1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb", "2g.20gb"} {
			req := mig.MustRequest(mig.RequestItem{Profile: prof, Count: 1})
			want, err := mig.Place(mig.Node{GPUs: []mig.GPU{{State: state, Usable: true}}}, req)
			p := s.create(s.pod(fmt.Sprintf("mixed-%d", i), map[string]int64{prof: 1}))
			if err != nil {
				// The core says it does not fit: the pod stays Pending and says why.
				full++
				Eventually(func() string { return unschedulable(s.get(p.Name)) }).Should(ContainSubstring(prof))
				continue
			}
			fits++
			Eventually(func() string { return s.get(p.Name).Spec.NodeName }).Should(Equal(node))
			got := s.allocationsOf(s.get(p.Name))
			Expect(got).To(HaveLen(1))
			Expect(got[0].Spec.Placement.Start).To(BeEquivalentTo(want[0].Placement.Start), "slice %d (%s)", i, prof)
			state, err = state.Take(want[0].Profile, want[0].Placement)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(fits).To(BeNumerically(">=", 3))
		Expect(full).To(BeNumerically(">=", 1), "the sequence overfills the GPU")
	})

	It("places whole GPUs on Slicer nodes by their GPUs and on NVIDIA's nodes by their allocatable", func() {
		// A Slicer node of two whole GPUs, which advertises no free nvidia.com/gpu (its agent
		// advertises a GPU only once an allocation holds it), and a node NVIDIA's device plugin
		// serves with two, without a NodeAccelerator.
		slicerNode, nvidiaNode := s.ns+"-slicer", s.ns+"-nvidia"
		Expect(framework.CreateNode(ctx, k8s, builder.Node(slicerNode).Label(poolLabel, s.pool).Ready().Capacity("nvidia.com/gpu", "0").Obj())).To(Succeed())
		na := framework.MakeNodeAccelerator(slicerNode).GPUs("H100-80GB", 2).Obj()
		for i := range na.Status.GPUs {
			na.Status.GPUs[i].Mode, na.Status.GPUs[i].MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
		}
		Expect(framework.CreateNodeAccelerator(ctx, k8s, na)).To(Succeed())
		Expect(framework.CreateNode(ctx, k8s, builder.Node(nvidiaNode).Label(poolLabel, s.pool).Ready().Capacity("nvidia.com/gpu", "2").Obj())).To(Succeed())
		s.nodes = append(s.nodes, slicerNode, nvidiaNode)
		start(plugin.Options{})

		wholePod := func(name string, gpus string) *corev1.Pod {
			return builder.Pod(s.ns, name).Scheduler(config.DefaultSchedulerName).NodeSelector(poolLabel, s.pool).
				Container("c", builder.Both("nvidia.com/gpu", gpus)).Obj()
		}
		a, b := s.create(wholePod("train-a", "2")), s.create(wholePod("train-b", "2"))
		Eventually(func() []string {
			return []string{s.get(a.Name).Spec.NodeName, s.get(b.Name).Spec.NodeName}
		}).Should(ConsistOf(slicerNode, nvidiaNode), "each pod takes the two GPUs of one node")
		onSlicer := s.get(a.Name)
		if onSlicer.Spec.NodeName != slicerNode {
			onSlicer = s.get(b.Name)
		}
		allocs := s.allocationsOf(onSlicer)
		Expect(allocs).To(HaveLen(2), "one allocation per whole GPU, on the Slicer node only")
		Expect(s.allocations()).To(HaveLen(2))
		var gpus []string
		for _, al := range allocs {
			Expect(al.Spec.WholeGPU).To(BeTrue())
			Expect(al.Spec.Profile).To(BeEmpty())
			Expect(al.Spec.Placement).To(BeNil())
			gpus = append(gpus, al.Spec.GPUUUID)
		}
		Expect(gpus).To(ConsistOf(framework.GPUUUID(slicerNode, 0), framework.GPUUUID(slicerNode, 1)))

		// Both nodes full: a third pod waits and says why, for each kind of node.
		c := s.create(wholePod("train-c", "1"))
		Eventually(func() string { return unschedulable(s.get(c.Name)) }).Should(SatisfyAll(
			ContainSubstring("no 1 free or switchable whole GPUs"), ContainSubstring("nvidia.com/gpu")))
		Consistently(func() string { return s.get(c.Name).Spec.NodeName }, "2s").Should(BeEmpty())

		// The Slicer pod ends: its GPUs are free again, and the waiting pod takes one of them.
		Expect(k8s.Delete(ctx, onSlicer, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() string { return s.get(c.Name).Spec.NodeName }).Should(Equal(slicerNode))
		Expect(s.allocationsOf(s.get(c.Name))).To(HaveLen(1))
	})

	It("still schedules ordinary pods, on nodes without GPUs too", func() {
		s.addNode(s.ns+"-cpu", 0)
		start(plugin.Options{})
		p := s.pod("plain", nil)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		s.create(p)
		Eventually(func() string { return s.get("plain").Spec.NodeName }).Should(Equal(s.ns + "-cpu"))
		Expect(s.allocations()).To(BeEmpty())
		// A MIG pod finds no NodeAccelerator there and says so.
		m := s.create(s.pod("mig", map[string]int64{"1g.10gb": 1}))
		Eventually(func() string { return unschedulable(s.get(m.Name)) }).Should(ContainSubstring("node has no NodeAccelerator"))
	})

	It("makes no API write in Filter/Score for a pod that never fits (S8)", func() {
		s.addNode(s.ns+"-n1", 1)
		start(plugin.Options{})
		before := proxy.Writes()
		p := s.create(s.pod("never", map[string]int64{"7g.80gb": 2}))
		Eventually(func() string { return unschedulable(s.get(p.Name)) }).Should(ContainSubstring("no GPU has a free slot"))
		after := proxy.Writes()
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				// The scheduler itself reports the failure: pod status and an Event.
				Expect(k).To(BeElementOf("PATCH pods/status", "POST events", "PATCH events"), "write %q (%d) during a failed attempt", k, d)
			}
		}
		Expect(after["POST sliceallocations"] - before["POST sliceallocations"]).To(BeZero())
	})

	It("binds a MIG pod with one write more than a plain pod: its allocation, which carries the agent's finalizer (no nominatedNodeName patch)", func() {
		s.addNode(s.ns+"-n1", 1)
		start(plugin.Options{})
		// writesOf is the scheduler's writes from a pod's create (the test's, not through the
		// proxy) to its binding, events aside (the kube-scheduler's Scheduled event).
		writesOf := func(p *corev1.Pod) map[string]int {
			before := proxy.Writes()
			s.create(p)
			Eventually(func() string { return s.get(p.Name).Spec.NodeName }).ShouldNot(BeEmpty())
			out := map[string]int{}
			for k, v := range proxy.Writes() {
				if d := v - before[k]; d > 0 && k != "POST events" && k != "PATCH events" {
					out[k] = d
				}
			}
			return out
		}
		plain := s.pod("plain", nil)
		plain.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
		plainWrites := writesOf(plain)
		GinkgoWriter.Printf("plain pod: %v\n", plainWrites)
		migWrites := writesOf(s.pod("lean", map[string]int64{"2g.20gb": 1}))
		GinkgoWriter.Printf("MIG pod: %v\n", migWrites)
		want := maps.Clone(plainWrites)
		want["POST sliceallocations"]++
		// With it on, the kube-scheduler would record the node in status.nominatedNodeName
		// before a PreBind that has work (runBindingCycle in pkg/scheduler/schedule_one.go),
		// which every MIG pod's has: Slicer's scheduler runs with it off
		// (scheduler/config.FeatureGates).
		Expect(utilfeature.DefaultFeatureGate.Enabled(features.NominatedNodeNameForExpectation)).To(BeFalse())
		Expect(migWrites).To(Equal(want), "the scheduler's writes for a MIG pod, against a plain pod's")
		got := s.allocationsOf(s.get("lean"))
		Expect(got).To(HaveLen(1))
		Expect(got[0].Finalizers).To(Equal([]string{slicerv1alpha1.AllocationFinalizer}))
	})

	It("unreserves and retries when PreBind's write fails, leaking nothing (S2)", func() {
		s.addNode(s.ns+"-n1", 1)
		var failed atomic.Int32
		c, err := client.NewWithWatch(proxy.RestConfig(), client.Options{Scheme: plugin.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		faulty := interceptor.NewClient(c, interceptor.Funcs{
			Create: func(cctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*slicerv1alpha1.SliceAllocation); ok && failed.Add(1) <= 2 {
					return apierrors.NewInternalError(fmt.Errorf("injected"))
				}
				return cl.Create(cctx, obj, opts...)
			},
		})
		start(plugin.Options{Client: faulty})
		p := s.create(s.pod("retry", map[string]int64{"4g.40gb": 1}))
		Eventually(func() string { return s.get(p.Name).Spec.NodeName }).ShouldNot(BeEmpty())
		Expect(failed.Load()).To(BeNumerically(">=", 3))
		Expect(s.allocationsOf(s.get(p.Name))).To(HaveLen(1))
		Expect(testutil.ToFloat64(r.plugin.Metrics().Unreserve.WithLabelValues(plugin.UnreservePreBind))).To(BeNumerically("==", 2))
	})

	It("releases the slices of a pod deleted mid-cycle (S6)", func() {
		s.addNode(s.ns+"-n1", 1)
		var once sync.Once
		start(plugin.Options{Hooks: plugin.Hooks{AfterReserve: func(_ context.Context, pod *corev1.Pod) error {
			once.Do(func() {
				Expect(k8s.Delete(ctx, pod.DeepCopy(), client.GracePeriodSeconds(0))).To(Succeed())
			})
			return nil
		}}})
		p := s.create(s.pod("doomed", map[string]int64{"7g.80gb": 1}))
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		Eventually(func() []slicerv1alpha1.SliceAllocation { return s.allocations() }).Should(BeEmpty())
		Eventually(r.plugin.Cache().ReservationCount).Should(BeZero())
		// The GPU is whole again: a 7g fits.
		q := s.create(s.pod("next", map[string]int64{"7g.80gb": 1}))
		Eventually(func() string { return s.get(q.Name).Spec.NodeName }).ShouldNot(BeEmpty())
	})

	for _, point := range []string{"Reserve and PreBind", "PreBind and Bind"} {
		It("binds once with exactly one allocation after a restart between "+point+" (S4)", func() {
			s.addNode(s.ns+"-n1", 1)
			s.addNode(s.ns+"-n2", 1)
			killCtx, kill := context.WithCancel(ctx)
			defer kill()
			var killed atomic.Bool
			die := func(hctx context.Context, _ *corev1.Pod) error {
				if killed.CompareAndSwap(false, true) {
					kill() // the process dies here: nothing after this point runs
					<-hctx.Done()
					return fmt.Errorf("scheduler killed")
				}
				return nil
			}
			hooks := plugin.Hooks{AfterReserve: die}
			if point == "PreBind and Bind" {
				hooks = plugin.Hooks{AfterPreBind: die}
			}
			bindsBefore := proxy.Writes()["POST pods/binding"]
			first := startScheduler(killCtx, plugin.Options{Hooks: hooks}, timeout)
			p := s.create(s.pod("restart", map[string]int64{"3g.40gb": 1, "1g.10gb": 1}))
			Eventually(first.sched.Done()).Should(BeClosed())
			Expect(killed.Load()).To(BeTrue())
			Expect(s.get(p.Name).Spec.NodeName).To(BeEmpty())
			if point == "PreBind and Bind" {
				Expect(s.allocationsOf(s.get(p.Name))).To(HaveLen(2), "PreBind committed before the kill")
			}
			committed := sortedNames(s.allocationsOf(s.get(p.Name)))

			By("a fresh scheduler rebuilds from the API and finishes the job")
			start(plugin.Options{})
			Eventually(func() string { return s.get(p.Name).Spec.NodeName }).ShouldNot(BeEmpty())
			got := s.allocationsOf(s.get(p.Name))
			Expect(got).To(HaveLen(2))
			if point == "PreBind and Bind" {
				Expect(sortedNames(got)).To(Equal(committed), "the committed allocations are adopted, not re-made")
				Expect(got[0].Spec.NodeName).To(Equal(s.get(p.Name).Spec.NodeName))
			}
			Expect(proxy.Writes()["POST pods/binding"]-bindsBefore).To(Equal(1), "bound once")
		})
	}
})
