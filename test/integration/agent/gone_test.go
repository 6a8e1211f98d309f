package agent_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/test/framework"
)

var _ = Describe("An allocation that is gone by the time the agent acts", func() {
	// The agent lists allocations from its cache; the scheduler's Unreserve (or a deleted
	// pod) may already have removed one. Found by the e2e churn: the slice was created
	// anyway and left to the orphan grace period. Only an allocation created without the
	// finalizer (by a scheduler up to v0.1.0) can be gone while the cache shows it live.
	It("gets no slice when adding the finalizer finds it deleted (upgrade from v0.1.0)", func() {
		n := newNode("n-gone", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		a := n.allocateV010(0, "1g.10gb", 6, 1)
		// A client on the real apiserver whose finalizer patch arrives just after the
		// allocation was deleted.
		direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		c := interceptor.NewClient(direct, interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*slicerv1alpha1.SliceAllocation); ok {
					Expect(cl.Delete(ctx, obj.DeepCopyObject().(client.Object))).To(Succeed())
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		})
		r := agent.New(c, events.NewFakeRecorder(100), agent.Options{NodeName: n.name, Library: n.backend, Emulated: true,
			CDI: &cdi.Writer{Dir: n.cdiDir}, Usage: n.usage, Advertiser: n.adv, OrphanGrace: n.grace})
		_, err = r.Reconcile(ctx, ctrl.Request{})
		Expect(err).NotTo(HaveOccurred())
		n.waitGone(a)
		Expect(n.backend.Instances()).To(BeEmpty(), "a slice was created for an allocation that no longer exists")
	})
})

var _ = Describe("An allocation whose pod is gone", func() {
	// Issue 15 item 6: an allocation with no owner reference is never collected by the
	// garbage collector; the agent releases it on a GET from the API server that finds no
	// pod of that name, or one with another UID.
	It("is released with a PodGone event and a count, its slice destroyed; one whose pod exists is untouched", func() {
		n := newNode("n-podgone", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		n.start()
		kept := n.allocate(0, "1g.10gb", 0, 1)
		deleted := n.allocate(0, "1g.10gb", 1, 1)
		recreated := n.allocate(0, "1g.10gb", 2, 1)
		keptDevice := n.waitReady(kept).Status.MIGDeviceUUID
		n.waitReady(deleted)
		n.waitReady(recreated)
		Expect(n.backend.Instances()).To(HaveLen(3))

		// One pod is deleted; another is deleted and created again under its name (new UID).
		for _, a := range []*slicerv1alpha1.SliceAllocation{deleted, recreated} {
			Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Spec.PodName}},
				client.GracePeriodSeconds(0))).To(Succeed())
		}
		Eventually(func() error {
			return k8s.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: recreated.Spec.PodName}, &corev1.Pod{})
		}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("not found")))
		again := n.pod(recreated.Spec.PodName)
		Expect(string(again.UID)).NotTo(Equal(recreated.Spec.PodUID))
		// And one is created by hand for a pod that never existed.
		never := framework.MakeSliceAllocation("team-a", "n-podgone-never").Node(n.name).GPU(n.gpu(0)).Profile("1g.10gb", 3, 1).
			Pod("nobody", "00000000-0000-4000-8000-00000000dead").Obj()
		never.Labels = map[string]string{slicerv1alpha1.LabelNode: n.name, slicerv1alpha1.LabelPodUID: never.Spec.PodUID}
		Expect(k8s.Create(ctx, never)).To(Succeed())

		for _, a := range []*slicerv1alpha1.SliceAllocation{deleted, recreated, never} {
			n.waitGone(a)
		}
		Eventually(func() []framework.DeviceInstance { return n.deviceInstances() }).WithTimeout(30*time.Second).Should(
			ConsistOf(HaveField("MIGUUID", keptDevice)), "the released allocations' slices are destroyed, no other")
		got := n.get(kept)
		Expect(got.DeletionTimestamp).To(BeNil())
		Expect(got.Status.State).To(Equal(slicerv1alpha1.AllocationReady))
		Expect(testutil.ToFloat64(n.metrics.PodGone)).To(Equal(3.0))
		// Events reach the API server asynchronously.
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(k8s.List(ctx, &evs, client.InNamespace("team-a"))).To(Succeed())
			podGone := map[string]bool{}
			for _, e := range evs.Items {
				if e.Reason == "PodGone" {
					podGone[e.InvolvedObject.Name] = true
				}
			}
			for _, a := range []*slicerv1alpha1.SliceAllocation{deleted, recreated, never} {
				g.Expect(podGone).To(HaveKey(a.Name))
			}
			g.Expect(podGone).NotTo(HaveKey(kept.Name))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		n.invariants()
	})
})
