package api_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/framework"
)

var _ = Describe("SliceAllocation validation", func() {
	DescribeTable("create (server-side dry run)",
		func(mutate func(*slicerv1alpha1.SliceAllocation), want *rejection) {
			a := framework.MakeSliceAllocation("team-a", "train-0").Profile("3g.40gb", 4, 4).Obj()
			mutate(a)
			expectOutcome(k8s.Create(ctx, a, client.DryRunAll), want)
		},
		Entry("valid 3g at 4", func(*slicerv1alpha1.SliceAllocation) {}, nil),
		Entry("valid +me profile spelled .me", func(a *slicerv1alpha1.SliceAllocation) {
			a.Spec.Profile, a.Spec.Placement = "1g.10gb.me", &slicerv1alpha1.Placement{Start: 6, Size: 1}
		}, nil),
		Entry("profile spelled with +", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Profile = "1g.10gb+me" },
			rejected("spec.profile", "Unsupported value")),
		Entry("profile of no GPU", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Profile = "3g.41gb" },
			rejected("spec.profile", "Unsupported value")),
		Entry("placement misaligned", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Placement.Start = 2 },
			rejected("spec.placement", "start must be a multiple of size")),
		Entry("placement past the end", func(a *slicerv1alpha1.SliceAllocation) {
			a.Spec.Placement = &slicerv1alpha1.Placement{Start: 4, Size: 8}
		}, rejected("spec.placement", "must not exceed the GPU's 8 memory slices")),
		Entry("negative start", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Placement.Start = -4 },
			rejected("spec.placement.start", "greater than or equal to 0")),
		Entry("GPU UUID malformed", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.GPUUUID = "gpu-0000" },
			rejected("spec.gpuUUID", "should match")),
		Entry("missing pod UID", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.PodUID = "" },
			rejected("spec.podUID", "at least 1 chars long")),
		Entry("missing node", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.NodeName = "" },
			rejected("spec.nodeName", "at least 1 chars long")),
		Entry("index 64", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Index = 64 },
			rejected("spec.index", "less than or equal to 63")),
		Entry("valid whole GPU", func(a *slicerv1alpha1.SliceAllocation) {
			a.Spec.WholeGPU, a.Spec.Profile, a.Spec.Placement = true, "", nil
		}, nil),
		Entry("whole GPU naming a profile", func(a *slicerv1alpha1.SliceAllocation) {
			a.Spec.WholeGPU, a.Spec.Placement = true, nil
		}, rejected("spec", "a whole GPU (wholeGPU true) names neither")),
		Entry("whole GPU naming a placement", func(a *slicerv1alpha1.SliceAllocation) {
			a.Spec.WholeGPU, a.Spec.Profile = true, ""
		}, rejected("spec", "a whole GPU (wholeGPU true) names neither")),
		Entry("slice without a placement", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Placement = nil },
			rejected("spec", "a slice names its profile and placement")),
		Entry("slice without a profile", func(a *slicerv1alpha1.SliceAllocation) { a.Spec.Profile = "" },
			rejected("spec", "a slice names its profile and placement")),
	)

	It("keeps the spec immutable and validates the agent's status", func() {
		a := framework.MakeSliceAllocation("team-a", "immutable-0").Profile("2g.20gb", 2, 2).Obj()
		Expect(k8s.Create(ctx, a)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, a)).To(Succeed()) })

		relabelled := a.DeepCopy()
		relabelled.Labels = map[string]string{"x": "y"}
		expectOutcome(k8s.Update(ctx, relabelled, client.DryRunAll), nil)

		moved := a.DeepCopy()
		moved.Spec.Placement.Start = 4
		expectOutcome(k8s.Update(ctx, moved, client.DryRunAll), rejected("spec", "spec is immutable"))

		ready := a.DeepCopy()
		ready.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady, MIGDeviceUUID: "MIG-5c4e3e3a-0000-5000-8000-000000000001"}
		expectOutcome(k8s.Status().Update(ctx, ready, client.DryRunAll), nil)

		bogus := a.DeepCopy()
		bogus.Status.State = "Done"
		expectOutcome(k8s.Status().Update(ctx, bogus, client.DryRunAll), rejected("status.state", "Unsupported value"))

		misplaced := a.DeepCopy()
		misplaced.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady, ActualPlacement: &slicerv1alpha1.Placement{Start: 1, Size: 2}}
		expectOutcome(k8s.Status().Update(ctx, misplaced, client.DryRunAll), rejected("status.actualPlacement", "start must be a multiple of size"))
	})
})
