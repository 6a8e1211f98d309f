package migapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
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
		{"mode MIG", free, with(func(g *slicerv1alpha1.GPUStatus) { g.Mode = slicerv1alpha1.GPUModeMIG }), NotBlocked, ""},
		{"whole", free, whole, BlockedWholeMode, "GPU is in whole mode (MIG off)"},
		{"whole without a MIG model", free, with(func(g *slicerv1alpha1.GPUStatus) {
			*g = whole
			g.Model = ""
		}), BlockedWholeMode, "GPU is in whole mode (MIG off)"},
		{"unhealthy whole", free, with(func(g *slicerv1alpha1.GPUStatus) {
			*g = whole
			g.Health = slicerv1alpha1.GPUUnhealthy
		}), BlockedHealth, "GPU is Unhealthy"},
		{"whole on a blocked node", blocked, whole, BlockedNode, "GPU driver not ready (Loading)"},
		{"switching", free, switching, BlockedSwitching, "GPU is switching MIG mode (to Whole, Pending: HeldByClient, dcgm holds the GPU)"},
		{"switching, no modeSwitch", free, with(func(g *slicerv1alpha1.GPUStatus) { g.Mode = slicerv1alpha1.GPUModeSwitching }), BlockedSwitching, "GPU is switching MIG mode"},
	}
	for _, c := range cases {
		got, words := GPUBlocked(c.na, &c.gpu)
		if got != c.want || words != c.words {
			t.Errorf("%s: GPUBlocked = %q, %q; want %q, %q", c.name, got, words, c.want, c.words)
		}
	}
}

func TestGPUServes(t *testing.T) {
	free := &slicerv1alpha1.NodeAccelerator{}
	cases := []struct {
		name string
		gpu  slicerv1alpha1.GPUStatus
		mode mig.GPUMode
		want Blocked
	}{
		// An agent that predates modes: migMode alone decides, as before.
		{"no mode, MIG on", slicerv1alpha1.GPUStatus{Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeEnabled, Health: slicerv1alpha1.GPUHealthy}, mig.ModeMIG, NotBlocked},
		{"no mode, MIG off", slicerv1alpha1.GPUStatus{Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeDisabled, Health: slicerv1alpha1.GPUHealthy}, mig.ModeMIG, BlockedMIGMode},
		{"no mode, no MIG model", slicerv1alpha1.GPUStatus{MIGMode: slicerv1alpha1.MIGModeNotSupported, Health: slicerv1alpha1.GPUHealthy}, mig.ModeMIG, BlockedModel},
		{"MIG", slicerv1alpha1.GPUStatus{Model: "A100-40GB", MIGMode: slicerv1alpha1.MIGModeEnabled, Mode: slicerv1alpha1.GPUModeMIG, Health: slicerv1alpha1.GPUHealthy}, mig.ModeMIG, NotBlocked},
		// A whole GPU needs no MIG model and no MIG state.
		{"whole", whole, mig.ModeWhole, NotBlocked},
		{"whole, no MIG", slicerv1alpha1.GPUStatus{MIGMode: slicerv1alpha1.MIGModeNotSupported, Mode: slicerv1alpha1.GPUModeWhole, Health: slicerv1alpha1.GPUHealthy}, mig.ModeWhole, NotBlocked},
		{"switching", switching, mig.ModeSwitching, NotBlocked},
		{"unhealthy switching", func() slicerv1alpha1.GPUStatus {
			g := switching
			g.Health = slicerv1alpha1.GPUUnhealthy
			return g
		}(), mig.ModeSwitching, BlockedHealth},
	}
	for _, c := range cases {
		mode, got, _ := GPUServes(free, &c.gpu)
		if mode != c.mode || got != c.want {
			t.Errorf("%s: GPUServes = %v, %q; want %v, %q", c.name, mode, got, c.mode, c.want)
		}
	}
}

// whole is a healthy H100 in whole mode; switching is one switching to whole, held by a client.
var (
	whole = slicerv1alpha1.GPUStatus{Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeDisabled,
		Mode: slicerv1alpha1.GPUModeWhole, Health: slicerv1alpha1.GPUHealthy}
	switching = slicerv1alpha1.GPUStatus{Model: "H100-80GB", MIGMode: slicerv1alpha1.MIGModeEnabled,
		Mode: slicerv1alpha1.GPUModeSwitching, Health: slicerv1alpha1.GPUHealthy,
		ModeSwitch: &slicerv1alpha1.GPUModeSwitch{TargetMode: slicerv1alpha1.GPUModeWhole, Phase: slicerv1alpha1.GPUModeSwitchPending,
			Reason: slicerv1alpha1.GPUModeSwitchHeldByClient, Message: "dcgm holds the GPU"}}
)
