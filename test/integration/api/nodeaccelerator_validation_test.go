package api_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/framework"
)

func validNodeAccelerator(node string) *slicerv1alpha1.NodeAccelerator {
	na := framework.MakeNodeAccelerator(node).GPUs("H100-80GB", 2).Obj()
	na.Status.Driver = slicerv1alpha1.DriverStateReady
	na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{
		Profile:    "3g.40gb",
		Placement:  slicerv1alpha1.Placement{Start: 4, Size: 4},
		State:      slicerv1alpha1.SliceAllocated,
		Allocation: &slicerv1alpha1.AllocationReference{Namespace: "team-a", Name: "p-0"},
	}}
	return na
}

var _ = Describe("NodeAccelerator validation", func() {
	It("rejects a name that differs from spec.nodeName", func() {
		na := validNodeAccelerator("node-a")
		na.Spec.NodeName = "node-b"
		expectOutcome(k8s.Create(ctx, na, client.DryRunAll), rejected("spec.nodeName", "must equal spec.nodeName"))
		expectOutcome(k8s.Create(ctx, validNodeAccelerator("node-a"), client.DryRunAll), nil)
	})

	It("keeps spec.nodeName immutable", func() {
		na := validNodeAccelerator("node-immutable")
		Expect(k8s.Create(ctx, na)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, na)).To(Succeed()) })
		same := na.DeepCopy()
		same.Labels = map[string]string{"touched": "yes"}
		expectOutcome(k8s.Update(ctx, same, client.DryRunAll), nil)
		moved := na.DeepCopy()
		moved.Spec.NodeName = "elsewhere"
		expectOutcome(k8s.Update(ctx, moved, client.DryRunAll), rejected("spec.nodeName", "nodeName is immutable"))
	})

	DescribeTable("status (server-side dry run of a status update)",
		func(mutate func(*slicerv1alpha1.NodeAcceleratorStatus), want *rejection) {
			expectStatusUpdate("node-status", mutate, want)
		},
		Entry("valid", func(*slicerv1alpha1.NodeAcceleratorStatus) {}, nil),
		Entry("GPU UUID malformed", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[1].UUID = "MIG-1234" },
			rejected("status.gpus[1].uuid", "should match")),
		Entry("duplicate GPU UUID", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[1].UUID = s.GPUs[0].UUID },
			rejected("status.gpus[1]", "Duplicate value")),
		Entry("GPU index 16", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[1].Index = 16 },
			rejected("status.gpus[1].index", "less than or equal to 15")),
		Entry("GPU model unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].Model = "V100-16GB" },
			rejected("status.gpus[0].model", "Unsupported value")),
		Entry("GPU model empty (not a MIG model)", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Model = ""
			s.GPUs[1].MIGMode = slicerv1alpha1.MIGModeNotSupported
		}, nil),
		Entry("dynamic policy allowing a reset", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].ModePolicy, s.GPUs[0].ResetAllowed = slicerv1alpha1.GPUModePolicyDynamic, true
		}, nil),
		Entry("reset allowed under a fixed policy", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].ModePolicy, s.GPUs[0].ResetAllowed = slicerv1alpha1.GPUModePolicyMIG, true
		}, rejected("status.gpus[0].resetAllowed", "resetAllowed applies only to modePolicy Dynamic")),
		Entry("mode policy unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].ModePolicy = "Auto" },
			rejected("status.gpus[0].modePolicy", "Unsupported value")),
		Entry("MIG mode unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].MIGMode = "On" },
			rejected("status.gpus[0].migMode", "Unsupported value")),
		Entry("health unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].Health = "Sick" },
			rejected("status.gpus[0].health", "Unsupported value")),
		Entry("driver state unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.Driver = "Loaded" },
			rejected("status.driver", "Unsupported value")),
		Entry("slice profile unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].Slices[0].Profile = "3g.41gb" },
			rejected("status.gpus[0].slices[0].profile", "Unsupported value")),
		Entry("slice placement misaligned", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Slices[0].Placement = slicerv1alpha1.Placement{Start: 2, Size: 4}
		}, rejected("status.gpus[0].slices[0].placement", "start must be a multiple of size")),
		Entry("slice placement past the end", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Slices[0].Placement = slicerv1alpha1.Placement{Start: 7, Size: 1}
			s.GPUs[0].Slices = append(s.GPUs[0].Slices, slicerv1alpha1.MIGSlice{
				Profile: "7g.80gb", Placement: slicerv1alpha1.Placement{Start: 8, Size: 8}, State: slicerv1alpha1.SliceFree,
			})
		}, rejected("status.gpus[0].slices[1].placement.start", "less than or equal to 7")),
		Entry("slice size 3", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Slices[0].Placement = slicerv1alpha1.Placement{Start: 0, Size: 3}
		}, rejected("status.gpus[0].slices[0].placement.size", "Unsupported value")),
		Entry("slice state unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].Slices[0].State = "Busy" },
			rejected("status.gpus[0].slices[0].state", "Unsupported value")),
		Entry("nine slices on a GPU", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			for i := 0; i < 8; i++ {
				s.GPUs[0].Slices = append(s.GPUs[0].Slices, s.GPUs[0].Slices[0])
			}
		}, rejected("status.gpus[0].slices", "must have at most 8 items")),
	)
})

// expectStatusUpdate creates a valid NodeAccelerator called name without status, then checks
// the outcome of a server-side dry run of a status update to its valid status changed by mutate.
func expectStatusUpdate(name string, mutate func(*slicerv1alpha1.NodeAcceleratorStatus), want *rejection) {
	GinkgoHelper()
	na := validNodeAccelerator(name)
	status := na.Status
	na.Status = slicerv1alpha1.NodeAcceleratorStatus{}
	Expect(k8s.Create(ctx, na)).To(Succeed())
	DeferCleanup(func() { Expect(k8s.Delete(ctx, na)).To(Succeed()) })
	mutate(&status)
	na.Status = status
	expectOutcome(k8s.Status().Update(ctx, na, client.DryRunAll), want)
}
