package framework

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/slicer-operator/slicer/test/builder"
)

// MakeSliceAllocation returns a builder of a valid allocation: pod name, a pod UID, node-1,
// a GPU UUID, a 1g.10gb slice at start 0.
func MakeSliceAllocation(namespace, name string) *builder.AllocationBuilder {
	return builder.Allocation(namespace, name).
		Pod(name, "5f0c6d4e-0000-4000-8000-000000000001").
		Node("node-1").
		GPU("GPU-00000000-0000-0000-0000-000000000001").
		Profile("1g.10gb", 0, 1)
}

// MakeNodeAccelerator returns a builder of the NodeAccelerator of node, with no GPUs.
func MakeNodeAccelerator(node string) *builder.AcceleratorBuilder {
	return builder.Accelerator(node).NodeName(node)
}

// GPUUUID is builder.GPUUUID, the UUIDs MakeNodeAccelerator(node).GPUs gives.
func GPUUUID(node string, index int) string { return builder.GPUUUID(node, index) }

// MakeNamespace returns a namespace object.
func MakeNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
