package agent_test

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
)

// setPodStatus writes the pod's phase (and its one container's restart count), as the
// kubelet does.
func setPodStatus(a *slicerv1alpha1.SliceAllocation, phase corev1.PodPhase, restarts int32) {
	var pod corev1.Pod
	Expect(k8s.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}, &pod)).To(Succeed())
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "none", RestartCount: restarts}}
	Expect(k8s.Status().Update(ctx, &pod)).To(Succeed())
}

var _ = Describe("An allocation whose pod finished", func() {
	// Issue 26 item 1: a pod in phase Succeeded or Failed uses no device (the kubelet's
	// device manager hands its devices on, kube-scheduler stops counting it) while its object
	// stays, as a Job keeps its pods. The agent releases its allocations on that phase read
	// from the API server, with the allocation's pod UID.
	It("is released with a PodFinished event when the pod Succeeded or Failed; a pod whose containers restart keeps its slice", func() {
		n := newNode("n-finished", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		succeeded := n.allocate(0, "3g.40gb", 0, 4)
		failed := n.allocate(0, "1g.10gb", 4, 1)
		restarting := n.allocate(0, "1g.10gb", 5, 1)
		running := n.allocate(0, "1g.10gb", 6, 1)
		n.waitReady(succeeded)
		n.waitReady(failed)
		restartingDevice := n.waitReady(restarting).Status.MIGDeviceUUID
		runningDevice := n.waitReady(running).Status.MIGDeviceUUID
		Expect(n.backend.Instances()).To(HaveLen(4))

		setPodStatus(restarting, corev1.PodRunning, 3)
		setPodStatus(running, corev1.PodRunning, 0)
		setPodStatus(succeeded, corev1.PodSucceeded, 0)
		setPodStatus(failed, corev1.PodFailed, 2)

		n.waitGone(succeeded)
		n.waitGone(failed)
		Eventually(func() []string {
			var out []string
			for _, d := range n.deviceInstances() {
				out = append(out, d.MIGUUID)
			}
			return out
		}).WithTimeout(30*time.Second).Should(ConsistOf(restartingDevice, runningDevice), "the finished pods' slices are destroyed, no other")
		// The pods' objects stay.
		for _, a := range []*slicerv1alpha1.SliceAllocation{succeeded, failed} {
			Expect(k8s.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}, &corev1.Pod{})).To(Succeed())
		}
		// A restart of the restarting pod's container (phase still Running) changes nothing.
		setPodStatus(restarting, corev1.PodRunning, 4)
		Consistently(func(g Gomega) {
			for _, a := range []*slicerv1alpha1.SliceAllocation{restarting, running} {
				got := n.get(a)
				g.Expect(got.DeletionTimestamp).To(BeNil())
				g.Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
			}
		}).WithTimeout(3 * time.Second).Should(Succeed())
		Expect(testutil.ToFloat64(n.metrics.PodFinished)).To(Equal(2.0))
		Expect(testutil.ToFloat64(n.metrics.PodGone)).To(Equal(0.0))
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace("team-a"))).To(Succeed())
			finished := map[string]bool{}
			for _, e := range evs.Items {
				if e.Reason == "PodFinished" {
					finished[e.InvolvedObject.Name] = true
				}
			}
			g.Expect(finished).To(HaveKey(succeeded.Name))
			g.Expect(finished).To(HaveKey(failed.Name))
			g.Expect(finished).NotTo(HaveKey(restarting.Name))
			g.Expect(finished).NotTo(HaveKey(running.Name))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		n.invariants()

		// The freed room takes the next pod's slice at the same placement.
		next := n.allocate(0, "3g.40gb", 0, 4)
		n.waitReady(next)
		n.invariants()
	})

	It("is not released on a cache that shows the pod finished while the API server has it Running", func() {
		n := newNode("n-finished-stale", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		a := n.allocate(0, "1g.10gb", 0, 1)
		setPodStatus(a, corev1.PodRunning, 0)
		// The agent's reads of pods (its cache) say Succeeded; the API server says Running.
		direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		var forged atomic.Int32
		c := interceptor.NewClient(direct, interceptor.Funcs{
			Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if err := cl.Get(ctx, key, obj, opts...); err != nil {
					return err
				}
				if pod, ok := obj.(*corev1.Pod); ok {
					pod.Status.Phase = corev1.PodSucceeded
					forged.Add(1)
				}
				return nil
			},
		})
		metrics := engine.NewMetrics(prometheus.NewRegistry())
		r := agent.New(c, events.NewFakeRecorder(100), agent.Options{NodeName: n.name, Library: n.backend, Emulated: true,
			CDI: &cdi.Writer{Dir: n.cdiDir}, Usage: n.usage, Advertiser: n.adv, OrphanGrace: n.grace, Metrics: metrics, Live: k8s})
		for range 3 {
			_, err := r.Reconcile(ctx, ctrl.Request{})
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(forged.Load()).To(BeNumerically(">", 0), "the agent never read the forged cached pod")
		got := n.get(a)
		Expect(got.DeletionTimestamp).To(BeNil(), "released on the cache's word")
		Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
		Expect(n.backend.Instances()).To(HaveLen(1))
		Expect(testutil.ToFloat64(metrics.PodFinished)).To(Equal(0.0))

		// Once the API server agrees, the same agent releases it.
		setPodStatus(a, corev1.PodSucceeded, 0)
		Eventually(func() error {
			_, err := r.Reconcile(ctx, ctrl.Request{})
			if err != nil {
				return err
			}
			return k8s.Get(ctx, client.ObjectKeyFromObject(a), &slicerv1alpha1.SliceAllocation{})
		}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("not found")))
		Expect(n.backend.Instances()).To(BeEmpty())
		Expect(testutil.ToFloat64(metrics.PodFinished)).To(Equal(1.0))
	})
})
