package agent_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/internal/mig"
)

var _ = Describe("An allocation that is gone by the time the agent acts", func() {
	// The agent lists allocations from its cache; the scheduler's Unreserve (or a deleted
	// pod) may already have removed one. Found by the e2e churn: the slice was created
	// anyway and left to the orphan grace period.
	It("gets no slice when adding the finalizer finds it deleted", func() {
		n := newNode("n-gone", mig.H100_80GB)
		DeferCleanup(n.cleanup)
		a := n.allocate(0, "1g.10gb", 6, 1)
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
