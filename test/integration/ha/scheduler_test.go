package ha_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

const (
	schedPool    = "it.slicer.dev/ha-pool"
	schedNodes   = 4
	gpusPerNode  = 8
	burstPods    = 200 // 1g.10gb: 7 per H100-80GB, 224 on 4 × 8 GPUs: all fit
	burstProfile = "1g.10gb"
	// killAfter bound pods, the leader dies (SIGKILL).
	killAfter = 40
)

// Short leader-election timings so that a takeover happens within seconds;
// nothing below waits on them, it waits on what the standby does.
var schedLease = config.Options{LeaseDuration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond}

var _ = Describe("Two scheduler replicas", func() {
	It("the standby takes over a burst from a killed leader: each pod bound once, no slot held twice (S1, S4, I1, I3, I5, I8)", func() {
		ns := "ha-sched"
		Expect(k8s.Create(ctx, framework.MakeNamespace(ns))).To(Succeed())
		for i := range schedNodes {
			name := fmt.Sprintf("ha-sched-n%d", i)
			Expect(framework.CreateNode(ctx, k8s, builder.Node(name).Label(schedPool, ns).Ready().Obj())).To(Succeed())
			Expect(framework.CreateNodeAccelerator(ctx, k8s, framework.MakeNodeAccelerator(name).GPUs("H100-80GB", gpusPerNode).Obj())).To(Succeed())
		}
		agent, err := framework.StartFakeAgent(ctx, env.Config, framework.FakeAgentOptions{ReportSlices: true, CollectOrphans: true})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(agent.Stop)

		bin := build("./scheduler/cmd/slicer-scheduler")
		start := func(name string) *replica {
			return startReplica(name, bin, func(kubeconfig string) []string {
				o := schedLease
				o.Kubeconfig, o.LeaderElect, o.LeaseNamespace = kubeconfig, true, leaseNamespace
				o.SliceReadyTimeout, o.QPS, o.Burst = 30*time.Second, 500, 1000
				data, err := config.Render(o)
				Expect(err).NotTo(HaveOccurred())
				file := filepath.Join(dir, name+".yaml")
				Expect(framework.WriteFile(file, data)).To(Succeed())
				return []string{"--config=" + file, "--secure-port=0", "--v=2"}
			})
		}
		// The first replica leads; the second starts once it does and waits.
		a := start("scheduler-a")
		Eventually(func() string { return holder(leaseNamespace, config.DefaultLeaseName) }).ShouldNot(BeEmpty())
		leader := holder(leaseNamespace, config.DefaultLeaseName)
		b := start("scheduler-b")
		Eventually(func() []string { return b.lines(`(?i)attempting to acquire leader lease`) }).ShouldNot(BeEmpty())

		// The burst: 8 writers create the pods while the leader schedules.
		var created atomic.Int32
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := w; i < burstPods; i += 8 {
					p := builder.Pod(ns, fmt.Sprintf("burst-%03d", i)).Scheduler(config.DefaultSchedulerName).NodeSelector(schedPool, ns).
						Container("c", builder.Both(mig.ResourceName(burstProfile), "1")).Obj()
					Expect(k8s.Create(ctx, p)).To(Succeed())
					created.Add(1)
				}
			}()
		}
		bound := func() int {
			var pods corev1.PodList
			Expect(k8s.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			n := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					n++
				}
			}
			return n
		}
		Eventually(bound).Should(BeNumerically(">=", killAfter))
		Expect(a.running()).To(BeTrue(), "the leader died before it was killed: %s", a.exitStatus())
		standbyWrites := b.proxy.Writes()
		a.kill()
		killed := time.Now()
		atKill, createdAtKill := bound(), created.Load()
		GinkgoWriter.Printf("leader %s SIGKILLed with %d of %d pods bound (%d created)\n", leader, atKill, burstPods, createdAtKill)
		Expect(atKill).To(BeNumerically("<", burstPods), "the burst must still be running when the leader dies")
		// The standby scheduled nothing while it waited.
		Expect(standbyWrites["POST pods/binding"]).To(BeZero(), "standby bound pods while another replica led: %v", standbyWrites)
		Expect(standbyWrites["POST sliceallocations"]).To(BeZero(), "standby committed slices while another replica led: %v", standbyWrites)

		Eventually(func() string { return holder(leaseNamespace, config.DefaultLeaseName) }).ShouldNot(Or(BeEmpty(), Equal(leader)))
		GinkgoWriter.Printf("Lease taken over %s after the kill by %s\n", since(killed), holder(leaseNamespace, config.DefaultLeaseName))
		wg.Wait()
		Eventually(bound).Should(Equal(burstPods))
		GinkgoWriter.Printf("all %d pods bound %s after the kill\n", burstPods, since(killed))
		for _, l := range b.lines(`(?i)snapshot rebuilt|acquire leader lease|successfully acquired lease`) {
			GinkgoWriter.Println("scheduler-b: " + l)
		}
		aw, bw := a.proxy.Writes(), b.proxy.Writes()
		GinkgoWriter.Printf("bindings: killed leader %d, new leader %d; allocation creates: %d, %d; allocation deletes: %d, %d\n",
			aw["POST pods/binding"], bw["POST pods/binding"], aw["POST sliceallocations"], bw["POST sliceallocations"],
			aw["DELETE sliceallocations"], bw["DELETE sliceallocations"])
		Expect(bw["POST pods/binding"]).To(BeNumerically(">", 0), "the new leader bound the rest of the burst")
		Expect(b.running()).To(BeTrue(), "new leader: %s", b.exitStatus())

		checkAllocations(ns, burstPods)
		// Still true once the dust settles: nothing is released or taken late.
		Eventually(agentSettled(ns)).Should(BeTrue())
		checkAllocations(ns, burstPods)
	})
})

// agentSettled reports whether every allocation of ns is Ready.
func agentSettled(ns string) func() bool {
	return func() bool {
		var list slicerv1alpha1.SliceAllocationList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, a := range list.Items {
			if a.Status.State != slicerv1alpha1.AllocationReady {
				return false
			}
		}
		return true
	}
}

// checkAllocations checks the namespace's pods and allocations:
// I1/I3 no two allocations overlap on a GPU, each a legal placement;
// I8 every pod is bound and holds exactly its one allocation, on its node;
// no allocation is orphaned (its pod, by UID, holds it on the same node).
func checkAllocations(ns string, pods int) {
	GinkgoHelper()
	var allocs slicerv1alpha1.SliceAllocationList
	Expect(k8s.List(ctx, &allocs, client.InNamespace(ns))).To(Succeed())
	models, err := framework.GPUModels(ctx, k8s)
	Expect(err).NotTo(HaveOccurred())
	perGPU := map[string][]slicerv1alpha1.SliceAllocation{}
	for _, a := range allocs.Items {
		perGPU[a.Spec.GPUUUID] = append(perGPU[a.Spec.GPUUUID], a)
	}
	for gpu, held := range perGPU {
		for i, x := range held {
			for _, y := range held[i+1:] {
				xs, xe := x.Spec.Placement.Start, x.Spec.Placement.Start+x.Spec.Placement.Size
				ys, ye := y.Spec.Placement.Start, y.Spec.Placement.Start+y.Spec.Placement.Size
				Expect(xe <= ys || ye <= xs).To(BeTrue(), "I1: on GPU %s, %s [%d,%d) and %s [%d,%d) overlap",
					gpu, x.Name, xs, xe, y.Name, ys, ye)
			}
		}
		m, ok := models[gpu]
		Expect(ok).To(BeTrue(), "allocations on unknown GPU %s", gpu)
		var inst []mig.Instance
		for _, a := range held {
			inst = append(inst, mig.Instance{Profile: string(a.Spec.Profile),
				Placement: mig.Placement{Start: int(a.Spec.Placement.Start), Size: int(a.Spec.Placement.Size)}})
		}
		_, err := mig.NewGPUState(m, inst)
		Expect(err).NotTo(HaveOccurred(), "I3: GPU %s", gpu)
	}

	var list corev1.PodList
	Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	Expect(list.Items).To(HaveLen(pods))
	byUID := map[string]corev1.Pod{}
	for _, p := range list.Items {
		Expect(p.Spec.NodeName).NotTo(BeEmpty(), "pod %s is not bound", p.Name)
		byUID[string(p.UID)] = p
	}
	held := map[string]int{}
	for _, a := range allocs.Items {
		p, ok := byUID[a.Spec.PodUID]
		Expect(ok).To(BeTrue(), "orphan: allocation %s holds a slice for pod %s (%s), which does not exist", a.Name, a.Spec.PodName, a.Spec.PodUID)
		Expect(a.Spec.PodName).To(Equal(p.Name), "allocation %s", a.Name)
		Expect(a.Spec.NodeName).To(Equal(p.Spec.NodeName), "I8: allocation %s is on node %s, its pod %s on %s", a.Name, a.Spec.NodeName, p.Name, p.Spec.NodeName)
		held[a.Spec.PodUID]++
	}
	for uid, p := range byUID {
		Expect(held[uid]).To(Equal(1), "I8: pod %s holds %d allocations, wants 1", p.Name, held[uid])
	}
}
