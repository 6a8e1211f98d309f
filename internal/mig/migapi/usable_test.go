package migapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestGPUBlocked(t *testing.T) {
	healthy := slicerv1alpha1.GPUStatus{Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeEnabled, Health: slicerv1alpha1.GPUHealthy}
	with := func(f func(*slicerv1alpha1.GPUStatus)) slicerv1alpha1.GPUStatus {
		g := healthy
		f(&g)
		return g
	}
	blocked := &slicerv1alpha1.NodeAccelerator{Status: slicerv1alpha1.NodeAcceleratorStatus{Conditions: []metav1.Condition{
		{Type: slicerv1alpha1.ConditionDriverNotReady, Status: metav1.ConditionTrue, Reason: "Loading"},
	}}}
	free := &slicerv1alpha1.NodeAccelerator{}
	cases := []struct {
		name  string
		na    *slicerv1alpha1.NodeAccelerator
		gpu   slicerv1alpha1.GPUStatus
		want  Blocked
		words string
	}{
		{"usable", free, healthy, NotBlocked, ""},
		{"no model", free, with(func(g *slicerv1alpha1.GPUStatus) { g.Model = "" }), BlockedModel, "not a supported MIG model"},
		{"MIG off", free, with(func(g *slicerv1alpha1.GPUStatus) { g.MIGMode = slicerv1alpha1.MIGModeDisabled }), BlockedMIGMode, "MIG mode is Disabled"},
		{"unhealthy", free, with(func(g *slicerv1alpha1.GPUStatus) { g.Health = slicerv1alpha1.GPUUnhealthy }), BlockedHealth, "GPU is Unhealthy"},
		{"node", blocked, healthy, BlockedNode, "GPU driver not ready (Loading)"},
		// The GPU's own reason comes first.
		{"unhealthy on a blocked node", blocked, with(func(g *slicerv1alpha1.GPUStatus) { g.Health = slicerv1alpha1.GPUUnhealthy }), BlockedHealth, "GPU is Unhealthy"},
	}
	for _, c := range cases {
		got, words := GPUBlocked(c.na, &c.gpu)
		if got != c.want || words != c.words {
			t.Errorf("%s: GPUBlocked = %q, %q; want %q, %q", c.name, got, words, c.want, c.words)
		}
	}
}
