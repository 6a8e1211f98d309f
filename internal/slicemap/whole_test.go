package slicemap

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Each GPU says its mode and where a switch stands, and a whole-GPU allocation is listed under
// its GPU with its pod, not as a slice that is not realized.
func TestWholeGPUsAndModes(t *testing.T) {
	whole := gpu(0, gpu0, "H100-80GB")
	whole.Mode, whole.MIGMode = slicerv1alpha1.GPUModeWhole, slicerv1alpha1.MIGModeDisabled
	switching := gpu(1, gpu1, "H100-80GB")
	switching.Mode = slicerv1alpha1.GPUModeSwitching
	switching.ModeSwitch = &slicerv1alpha1.GPUModeSwitch{TargetMode: slicerv1alpha1.GPUModeWhole,
		Phase: slicerv1alpha1.GPUModeSwitchPending, Reason: slicerv1alpha1.GPUModeSwitchHeldByClient}
	a := sliceAlloc("team-a", "train-0", "train", "u1", "n1", gpu0, "", 0, 0, slicerv1alpha1.AllocationReady)
	a.Spec.WholeGPU, a.Spec.Placement = true, nil
	in := Input{NodeAccelerators: []slicerv1alpha1.NodeAccelerator{nodeAcc("n1", whole, switching)},
		SliceAllocations: []slicerv1alpha1.SliceAllocation{a}, Pods: []corev1.Pod{pod("team-a", "train", "u1", corev1.PodRunning)}}
	m := Build(in, Options{})
	n := m.Nodes[0]
	if len(n.Unrealized) != 0 {
		t.Errorf("a whole GPU listed as not realized: %+v", n.Unrealized)
	}
	if got := n.GPUs[0].Whole; len(got) != 1 || got[0].Name != "train-0" || !got[0].WholeGPU || got[0].Pod == nil || got[0].Pod.Phase != "Running" {
		t.Errorf("GPU 0 whole holders %+v", got)
	}
	if n.GPUs[0].Mode != "Whole" || n.GPUs[1].Mode != "Switching (to Whole, Pending: HeldByClient)" {
		t.Errorf("modes %q, %q", n.GPUs[0].Mode, n.GPUs[1].Mode)
	}
	var b bytes.Buffer
	if err := WriteText(&b, m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mode Whole", "whole GPU: team-a/train-0  Ready  team-a/train", "held whole", "mode Switching (to Whole, Pending: HeldByClient)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}
