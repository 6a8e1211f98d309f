package operator_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/test/framework"
)

var _ = Describe("SliceAllocation guard", Ordered, func() {
	AfterEach(cleanSlate)

	It("lets only the scheduler's ServiceAccount create SliceAllocations; not even an admin can", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)

		byHand := framework.MakeSliceAllocation(ns, "nobody").Obj()
		// The apiserver compiles a new policy a moment after it is created.
		Eventually(func(g Gomega) {
			err := admin.Create(ctx, byHand.DeepCopy())
			if err == nil {
				g.Expect(admin.Delete(ctx, byHand.DeepCopy())).To(Succeed())
			}
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an admin created a SliceAllocation: %v", err)
			g.Expect(err.Error()).To(ContainSubstring("SliceAllocations are created only by Slicer's scheduler (" + render.SchedulerUsername(render.Options{Namespace: operatorNamespace}) + ")"))
		}).Should(Succeed())

		asScheduler, err := client.New(framework.ImpersonatedConfig(env.Config, operatorNamespace, render.SchedulerName), client.Options{Scheme: admin.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		Expect(asScheduler.Create(ctx, framework.MakeSliceAllocation(ns, "placed").Obj())).To(Succeed(), "the scheduler's ServiceAccount must create allocations")
	})
})
