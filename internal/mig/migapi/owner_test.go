package migapi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

func TestNodeForeign(t *testing.T) {
	node := func(labels map[string]string, capacity, allocatable corev1.ResourceList) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: labels},
			Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable},
		}
	}
	q := resource.MustParse
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		served     []string
		wantReason string
		wantInMsg  []string
	}{
		{name: "no node", node: nil},
		{name: "plain GPU node", node: node(nil, corev1.ResourceList{"cpu": q("8"), "slicer.dev/mig-1g.10gb": q("3")}, nil)},
		{name: "NVIDIA resources at zero", node: node(nil,
			corev1.ResourceList{"nvidia.com/gpu": q("0"), "nvidia.com/mig-1g.10gb": q("0")},
			corev1.ResourceList{"nvidia.com/gpu": q("0")})},
		{name: "other nvidia.com resources are not a device plugin of GPUs", node: node(nil, corev1.ResourceList{"nvidia.com/gpu.shared": q("4"), "nvidia.com/migx": q("1")}, nil)},
		{name: "MIG manager label", node: node(map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: "all-disabled"}, nil, nil),
			wantReason: slicerv1alpha1.ReasonForeignMIGManager, wantInMsg: []string{"nvidia.com/mig.config", `"all-disabled"`, "kubectl label node gpu-1 nvidia.com/mig.config-"}},
		{name: "MIG manager wins over a device plugin", node: node(map[string]string{slicerv1alpha1.LabelNVIDIAMIGConfig: ""}, corev1.ResourceList{"nvidia.com/gpu": q("1")}, nil),
			wantReason: slicerv1alpha1.ReasonForeignMIGManager},
		{name: "MIG resource in capacity", node: node(nil, corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("7")}, nil),
			wantReason: slicerv1alpha1.ReasonForeignDevicePlugin, wantInMsg: []string{"nvidia.com/mig-1g.10gb", "nvidia.com/gpu.deploy.device-plugin=false", "docs/install.md"}},
		{name: "whole GPUs in allocatable only", node: node(nil, nil, corev1.ResourceList{"nvidia.com/gpu": q("2")}),
			wantReason: slicerv1alpha1.ReasonForeignDevicePlugin, wantInMsg: []string{"advertises nvidia.com/gpu on"}},
		{name: "the caller's own whole GPUs", node: node(nil, corev1.ResourceList{"nvidia.com/gpu": q("2")}, corev1.ResourceList{"nvidia.com/gpu": q("2")}),
			served: []string{NVIDIAGPUResource}},
		{name: "the caller's own whole GPUs beside another plugin's slices", node: node(nil, corev1.ResourceList{"nvidia.com/gpu": q("2"), "nvidia.com/mig-1g.10gb": q("7")}, nil),
			served: []string{NVIDIAGPUResource}, wantReason: slicerv1alpha1.ReasonForeignDevicePlugin, wantInMsg: []string{"advertises nvidia.com/mig-1g.10gb on"}},
		{name: "many resources, sorted and bounded", node: node(nil, corev1.ResourceList{
			"nvidia.com/mig-7g.80gb": q("1"), "nvidia.com/mig-1g.10gb": q("1"), "nvidia.com/mig-2g.20gb": q("1"),
			"nvidia.com/mig-3g.40gb": q("1"), "nvidia.com/mig-4g.40gb": q("1"), "nvidia.com/gpu": q("1"),
		}, nil),
			wantReason: slicerv1alpha1.ReasonForeignDevicePlugin,
			wantInMsg:  []string{"nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb, nvidia.com/mig-3g.40gb, and 2 more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeForeign(tc.node, tc.served...)
			if got.Reason != tc.wantReason || got.Present() != (tc.wantReason != "") {
				t.Fatalf("NodeForeign() = %+v, want reason %q", got, tc.wantReason)
			}
			for _, s := range tc.wantInMsg {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not contain %q", got.Message, s)
				}
			}
		})
	}
}
