package render

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// agentGPUModesArgs is the agent container's --gpu-modes arguments.
func agentGPUModesArgs(t *testing.T, o Options) []string {
	t.Helper()
	var out []string
	for _, a := range agentPod(t, o).Spec.Containers[0].Args {
		if strings.HasPrefix(a, AgentGPUModesFlag) {
			out = append(out, a)
		}
	}
	return out
}

func TestAgentGPUModes(t *testing.T) {
	policies := []slicerv1alpha1.GPUModePolicy{
		{Model: "H100-80GB", NodeSelector: &slicerv1alpha1.GPUNodeSelector{MatchLabels: map[string]string{"pool": "train"}}, Mode: slicerv1alpha1.GPUModePolicyWhole},
		{Model: "A100-80GB", Mode: slicerv1alpha1.GPUModePolicyDynamic, AllowReset: true},
	}
	with := testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.GPUModes = policies })
	args := agentGPUModesArgs(t, with)
	want := []string{`--gpu-modes=[{"model":"H100-80GB","nodeSelector":{"matchLabels":{"pool":"train"}},"mode":"Whole"},{"model":"A100-80GB","mode":"Dynamic","allowReset":true}]`}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Fatalf("--gpu-modes (-want +got):\n%s", diff)
	}
	// The DRA frontend switches MIG modes too: its agents get the same flag.
	dra := agentGPUModesArgs(t, testOptions(func(s *slicerv1alpha1.Slicer) {
		s.Spec.GPUModes = policies
		s.Spec.Frontend = slicerv1alpha1.FrontendDRA
	}))
	if !slices.Equal(dra, args) {
		t.Errorf("DRA: args %v, want %v", dra, args)
	}
	// What the operator renders, the agent reads back as the Slicer wrote it.
	back, err := migapi.ParseGPUModesFlag(strings.TrimPrefix(args[0], AgentGPUModesFlag+"="))
	if err != nil {
		t.Fatalf("the agent refuses the rendered flag: %v", err)
	}
	if diff := cmp.Diff(policies, back); diff != "" {
		t.Errorf("parsed back (-want +got):\n%s", diff)
	}

	// No policies: no flag, so that a Slicer without GPU modes renders the DaemonSet it did.
	for name, o := range map[string]Options{
		"absent": testOptions(),
		"empty":  testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.GPUModes = []slicerv1alpha1.GPUModePolicy{} }),
	} {
		if args := agentGPUModesArgs(t, o); len(args) != 0 {
			t.Errorf("%s: args %v, want no %s", name, args, AgentGPUModesFlag)
		}
	}
	base, empty := agentPod(t, testOptions()), agentPod(t, testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.GPUModes = []slicerv1alpha1.GPUModePolicy{} }))
	if diff := cmp.Diff(base.Spec, empty.Spec); diff != "" {
		t.Errorf("an empty spec.gpuModes changes the agent's pod (-absent +empty):\n%s", diff)
	}
}
