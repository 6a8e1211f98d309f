package migapi

import (
	"testing"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

func TestSwitchable(t *testing.T) {
	for _, tc := range []struct {
		model  slicerv1alpha1.GPUModel
		policy slicerv1alpha1.GPUModePolicyMode
		reset  bool
		want   bool
	}{
		{"H100-80GB", slicerv1alpha1.GPUModePolicyDynamic, false, true},
		{"H100-80GB", "", false, false}, // an agent that does not switch
		{"H100-80GB", slicerv1alpha1.GPUModePolicyMIG, false, false},
		{"H100-80GB", slicerv1alpha1.GPUModePolicyWhole, false, false},
		{"A100-40GB", slicerv1alpha1.GPUModePolicyDynamic, false, false}, // needs a reset, not allowed
		{"A100-40GB", slicerv1alpha1.GPUModePolicyDynamic, true, true},
		{"A30-24GB", slicerv1alpha1.GPUModePolicyDynamic, true, true},
		{"", slicerv1alpha1.GPUModePolicyDynamic, true, false}, // no MIG model: never sliced
	} {
		g := &slicerv1alpha1.GPUStatus{Model: tc.model, ModePolicy: tc.policy, ResetAllowed: tc.reset}
		if got := Switchable(g); got != tc.want {
			t.Errorf("Switchable(%s, %q, reset %v) = %v, want %v", tc.model, tc.policy, tc.reset, got, tc.want)
		}
	}
}

func TestPolicyBlocks(t *testing.T) {
	for _, tc := range []struct {
		policy slicerv1alpha1.GPUModePolicyMode
		mode   mig.GPUMode
		blocks bool
	}{
		{slicerv1alpha1.GPUModePolicyWhole, mig.ModeMIG, true},
		{slicerv1alpha1.GPUModePolicyWhole, mig.ModeWhole, false},
		{slicerv1alpha1.GPUModePolicyMIG, mig.ModeWhole, true},
		{slicerv1alpha1.GPUModePolicyMIG, mig.ModeMIG, false},
		{slicerv1alpha1.GPUModePolicyDynamic, mig.ModeMIG, false},
		{slicerv1alpha1.GPUModePolicyDynamic, mig.ModeWhole, false},
		{"", mig.ModeWhole, false},
		{slicerv1alpha1.GPUModePolicyWhole, mig.ModeSwitching, false},
	} {
		g := &slicerv1alpha1.GPUStatus{ModePolicy: tc.policy}
		if got := PolicyBlocks(tc.mode, g); (got != "") != tc.blocks {
			t.Errorf("PolicyBlocks(%s, %q) = %q, want blocking %v", tc.mode, tc.policy, got, tc.blocks)
		}
	}
}
