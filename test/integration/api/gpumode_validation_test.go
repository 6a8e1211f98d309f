package api_test

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The GPU-mode API (docs/gpu-modes.md): spec.gpuModes on the Slicer, and each GPU's mode and
// mode switch in NodeAccelerator status.

func trainPool() *slicerv1alpha1.GPUNodeSelector {
	return &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": "train"}}
}

func requirement(key string, op metav1.LabelSelectorOperator, values ...string) slicerv1alpha1.GPUNodeSelectorRequirement {
	return slicerv1alpha1.GPUNodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func withPolicies(policies ...slicerv1alpha1.GPUModePolicy) func(*slicerv1alpha1.Slicer) {
	return func(s *slicerv1alpha1.Slicer) { s.Spec.GPUModes = policies }
}

func withSelector(sel slicerv1alpha1.GPUNodeSelector) func(*slicerv1alpha1.Slicer) {
	return withPolicies(slicerv1alpha1.GPUModePolicy{NodeSelector: &sel, Mode: slicerv1alpha1.GPUModePolicyDynamic})
}

// distinctPolicies are n policies that select different GPUs (one node label value each).
func distinctPolicies(n int) []slicerv1alpha1.GPUModePolicy {
	out := make([]slicerv1alpha1.GPUModePolicy, 0, n)
	for i := range n {
		out = append(out, slicerv1alpha1.GPUModePolicy{
			NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"rack": string(rune('a' + i))}},
			Mode:         slicerv1alpha1.GPUModePolicyDynamic,
		})
	}
	return out
}

var _ = Describe("Slicer spec.gpuModes validation", func() {
	DescribeTable("create (server-side dry run)",
		func(mutate func(*slicerv1alpha1.Slicer), want *rejection) {
			s := validSlicer()
			mutate(s)
			expectOutcome(k8s.Create(ctx, s, client.DryRunAll), want)
		},
		Entry("no policies (every GPU fixed in MIG mode)", withPolicies(), nil),
		// a policy selects something
		Entry("by model", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic}), nil),
		Entry("by node labels", withPolicies(slicerv1alpha1.GPUModePolicy{NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole}), nil),
		Entry("by model on some nodes", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "A100-80GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyMIG}), nil),
		Entry("selecting nothing", withPolicies(slicerv1alpha1.GPUModePolicy{Mode: slicerv1alpha1.GPUModePolicyDynamic}),
			rejected("spec.gpuModes[0]", "a policy must select GPUs: set model, nodeSelector or both")),
		// models: only MIG-capable ones
		Entry("a model without MIG", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "L40S-48GB", Mode: slicerv1alpha1.GPUModePolicyWhole}),
			rejected("spec.gpuModes[0].model", "Unsupported value")),
		// modes
		Entry("mode unknown", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", Mode: "Auto"}),
			rejected("spec.gpuModes[0].mode", "Unsupported value")),
		// allowReset only with Dynamic
		Entry("allowReset with Dynamic", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "A100-40GB", Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true}), nil),
		Entry("allowReset with MIG", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "A100-40GB", Mode: slicerv1alpha1.GPUModePolicyMIG, AllowReset: true}),
			rejected("spec.gpuModes[0].allowReset", "allowReset applies only to mode Dynamic")),
		Entry("allowReset with Whole", withPolicies(slicerv1alpha1.GPUModePolicy{Model: "A30-24GB", Mode: slicerv1alpha1.GPUModePolicyWhole, AllowReset: true}),
			rejected("spec.gpuModes[0].allowReset", "allowReset applies only to mode Dynamic")),
		// no two policies with the same selector
		Entry("the same model on different nodes", withPolicies(
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole},
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic}), nil),
		Entry("different models on the same nodes", withPolicies(
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole},
			slicerv1alpha1.GPUModePolicy{Model: "H200-141GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole}), nil),
		Entry("the same model twice", withPolicies(
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyWhole},
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic}),
			rejected("spec.gpuModes", "two policies select the same GPUs")),
		Entry("the same model and node labels twice, among others", withPolicies(
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole},
			slicerv1alpha1.GPUModePolicy{Model: "A30-24GB", Mode: slicerv1alpha1.GPUModePolicyMIG},
			slicerv1alpha1.GPUModePolicy{Model: "H100-80GB", NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyDynamic}),
			rejected("spec.gpuModes", "two policies select the same GPUs")),
		Entry("the same node labels twice", withPolicies(
			slicerv1alpha1.GPUModePolicy{NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyWhole},
			slicerv1alpha1.GPUModePolicy{NodeSelector: trainPool(), Mode: slicerv1alpha1.GPUModePolicyMIG}),
			rejected("spec.gpuModes", "two policies select the same GPUs")),
		// bounded
		Entry("8 policies", withPolicies(distinctPolicies(slicerv1alpha1.MaxGPUModePolicies)...), nil),
		Entry("9 policies", withPolicies(distinctPolicies(slicerv1alpha1.MaxGPUModePolicies+1)...),
			rejected("spec.gpuModes", "must have at most 8 items")),
		// the node selector
		Entry("selector with every operator", withSelector(slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			requirement("pool", metav1.LabelSelectorOpIn, "train", "batch"), requirement("tier", metav1.LabelSelectorOpNotIn, "infer"),
			requirement("rack", metav1.LabelSelectorOpExists), requirement("drain", metav1.LabelSelectorOpDoesNotExist)}}), nil),
		Entry("selector operator unknown", withSelector(slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			requirement("pool", "Equals", "train")}}),
			rejected("spec.gpuModes[0].nodeSelector.matchExpressions[0].operator", "Unsupported value")),
		Entry("selector Exists with values", withSelector(slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			requirement("rack", metav1.LabelSelectorOpExists, "r1")}}),
			rejected("spec.gpuModes[0].nodeSelector.matchExpressions[0].values", "values must be empty for Exists and DoesNotExist")),
		Entry("selector In without values", withSelector(slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			requirement("pool", metav1.LabelSelectorOpIn)}}),
			rejected("spec.gpuModes[0].nodeSelector.matchExpressions[0].values", "non-empty for In and NotIn")),
		Entry("selector without a key", withSelector(slicerv1alpha1.GPUNodeSelector{MatchExpressions: []slicerv1alpha1.GPUNodeSelectorRequirement{
			requirement("", metav1.LabelSelectorOpExists)}}),
			rejected("spec.gpuModes[0].nodeSelector.matchExpressions[0].key", "at least 1 chars long")),
		Entry("selector label value of 64 characters", withSelector(slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": strings.Repeat("x", 64)}}),
			rejected("spec.gpuModes[0].nodeSelector.matchLabels", "values at most 63")),
		Entry("selector of 17 labels", func(s *slicerv1alpha1.Slicer) {
			sel := slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{}}
			for i := range 17 {
				sel.MatchLabels[string(rune('a'+i))] = "x"
			}
			withSelector(sel)(s)
		}, rejected("spec.gpuModes[0].nodeSelector.matchLabels", "must have at most 16 items")),
	)
})

// modeSwitch is a valid switch of a GPU to target, pending on reason.
func modeSwitch(target slicerv1alpha1.GPUMode, reason slicerv1alpha1.GPUModeSwitchReason) *slicerv1alpha1.GPUModeSwitch {
	return &slicerv1alpha1.GPUModeSwitch{TargetMode: target, Phase: slicerv1alpha1.GPUModeSwitchPending, Reason: reason,
		Message: "pid 4242 holds the GPU", LastTransitionTime: metav1.Unix(1_800_000_000, 0)}
}

// wholeGPU makes a GPU of s a whole GPU: MIG mode off, no slices.
func wholeGPU(s *slicerv1alpha1.NodeAcceleratorStatus, i int) {
	s.GPUs[i].Slices = nil
	s.GPUs[i].MIGMode = slicerv1alpha1.MIGModeDisabled
	s.GPUs[i].Mode = slicerv1alpha1.GPUModeWhole
}

var _ = Describe("NodeAccelerator GPU mode validation", func() {
	DescribeTable("status (server-side dry run of a status update)",
		func(mutate func(*slicerv1alpha1.NodeAcceleratorStatus), want *rejection) {
			expectStatusUpdate("node-gpu-mode", mutate, want)
		},
		Entry("no mode (an agent that predates GPU modes)", func(*slicerv1alpha1.NodeAcceleratorStatus) {}, nil),
		Entry("one GPU MIG, one Whole", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Mode = slicerv1alpha1.GPUModeMIG
			wholeGPU(s, 1)
		}, nil),
		Entry("a GPU without MIG, Whole", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			wholeGPU(s, 1)
			s.GPUs[1].Model = ""
			s.GPUs[1].MIGMode = slicerv1alpha1.MIGModeNotSupported
		}, nil),
		Entry("mode unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) { s.GPUs[0].Mode = "Sliced" },
			rejected("status.gpus[0].mode", "Unsupported value")),
		// mode agrees with migMode and the slices
		Entry("MIG with MIG mode off", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeMIG
			s.GPUs[1].MIGMode = slicerv1alpha1.MIGModeDisabled
		}, rejected("status.gpus[1].mode", "mode MIG needs migMode Enabled")),
		Entry("Whole with MIG mode on", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			wholeGPU(s, 1)
			s.GPUs[1].MIGMode = slicerv1alpha1.MIGModeEnabled
		}, rejected("status.gpus[1].mode", "mode Whole needs migMode Disabled or NotSupported")),
		Entry("Whole with slices", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			slices := s.GPUs[0].Slices
			wholeGPU(s, 0)
			s.GPUs[0].Slices = slices
		}, rejected("status.gpus[0].slices", "a Whole GPU has no MIG slices")),
		// switching
		Entry("switching to Whole, held by a client", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchHeldByClient)
		}, nil),
		Entry("a switch to MIG that failed: no reset allowed", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			wholeGPU(s, 1)
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchResetNotAllowed)
			s.GPUs[1].ModeSwitch.Phase = slicerv1alpha1.GPUModeSwitchFailed
		}, nil),
		Entry("Switching without modeSwitch", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
		}, rejected("status.gpus[1].modeSwitch", "mode Switching needs modeSwitch")),
		Entry("a switch to the mode the GPU has", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Mode = slicerv1alpha1.GPUModeMIG
			s.GPUs[0].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeMIG, slicerv1alpha1.GPUModeSwitchNVMLError)
			s.GPUs[0].ModeSwitch.Phase = slicerv1alpha1.GPUModeSwitchFailed
		}, rejected("status.gpus[0].modeSwitch.targetMode", "the mode the GPU already has")),
		Entry("a switch to Switching", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[0].Mode = slicerv1alpha1.GPUModeMIG
			s.GPUs[0].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeSwitching, slicerv1alpha1.GPUModeSwitchResetRequired)
		}, rejected("status.gpus[0].modeSwitch.targetMode", "targetMode is Whole or MIG")),
		Entry("switch phase unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchInstancesPresent)
			s.GPUs[1].ModeSwitch.Phase = "Running"
		}, rejected("status.gpus[1].modeSwitch.phase", "Unsupported value")),
		Entry("switch reason unknown", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeWhole, "Busy")
		}, rejected("status.gpus[1].modeSwitch.reason", "Unsupported value")),
		Entry("switch message of 257 characters", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchHeldByClient)
			s.GPUs[1].ModeSwitch.Message = strings.Repeat("x", 257)
		}, rejected("status.gpus[1].modeSwitch.message", "256")),
		Entry("switch without a transition time", func(s *slicerv1alpha1.NodeAcceleratorStatus) {
			s.GPUs[1].Mode = slicerv1alpha1.GPUModeSwitching
			s.GPUs[1].ModeSwitch = modeSwitch(slicerv1alpha1.GPUModeWhole, slicerv1alpha1.GPUModeSwitchHeldByClient)
			s.GPUs[1].ModeSwitch.LastTransitionTime = metav1.Time{}
		}, rejected("status.gpus[1].modeSwitch.lastTransitionTime", "Required value")),
	)
})

// The example Slicer of docs/gpu-modes.md is accepted as written.
var _ = Describe("docs/gpu-modes.md", func() {
	It("has an example Slicer the apiserver accepts", func() {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "gpu-modes.md"))
		Expect(err).NotTo(HaveOccurred())
		// The first yaml block that is a Slicer (the page also shows a pod's limits).
		var example string
		for rest := string(raw); example == ""; {
			var found bool
			_, rest, found = strings.Cut(rest, "```yaml\n")
			Expect(found).To(BeTrue(), "docs/gpu-modes.md has no yaml block of a Slicer")
			block, after, found := strings.Cut(rest, "```")
			Expect(found).To(BeTrue(), "docs/gpu-modes.md: a yaml block does not end")
			if strings.Contains(block, "kind: Slicer\n") {
				example = block
			}
			rest = after
		}
		s := &slicerv1alpha1.Slicer{}
		Expect(yaml.UnmarshalStrict([]byte(example), s)).To(Succeed())
		Expect(s.Spec.GPUModes).NotTo(BeEmpty())
		expectOutcome(k8s.Create(ctx, s, client.DryRunAll), nil)
	})
})
