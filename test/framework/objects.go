package framework

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Test builders, chained: MakeSliceAllocation("ns", "a").Pod("p", "uid").Obj().

// SliceAllocationWrapper builds a SliceAllocation.
type SliceAllocationWrapper struct{ slicerv1alpha1.SliceAllocation }

// MakeSliceAllocation returns a valid allocation of a 1g.10gb slice at start 0.
func MakeSliceAllocation(namespace, name string) *SliceAllocationWrapper {
	return &SliceAllocationWrapper{slicerv1alpha1.SliceAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: slicerv1alpha1.SliceAllocationSpec{
			PodName:   name,
			PodUID:    "5f0c6d4e-0000-4000-8000-000000000001",
			NodeName:  "node-1",
			GPUUUID:   "GPU-00000000-0000-0000-0000-000000000001",
			Profile:   "1g.10gb",
			Placement: slicerv1alpha1.Placement{Start: 0, Size: 1},
		},
	}}
}

// Pod sets the holder pod.
func (w *SliceAllocationWrapper) Pod(name, uid string) *SliceAllocationWrapper {
	w.Spec.PodName, w.Spec.PodUID = name, uid
	return w
}

// Node sets the node.
func (w *SliceAllocationWrapper) Node(name string) *SliceAllocationWrapper {
	w.Spec.NodeName = name
	return w
}

// GPU sets the GPU UUID.
func (w *SliceAllocationWrapper) GPU(uuid string) *SliceAllocationWrapper {
	w.Spec.GPUUUID = uuid
	return w
}

// Profile sets the profile and placement.
func (w *SliceAllocationWrapper) Profile(p string, start, size int32) *SliceAllocationWrapper {
	w.Spec.Profile = slicerv1alpha1.MIGProfile(p)
	w.Spec.Placement = slicerv1alpha1.Placement{Start: start, Size: size}
	return w
}

// Obj returns the object.
func (w *SliceAllocationWrapper) Obj() *slicerv1alpha1.SliceAllocation { return &w.SliceAllocation }

// NodeAcceleratorWrapper builds a NodeAccelerator.
type NodeAcceleratorWrapper struct{ slicerv1alpha1.NodeAccelerator }

// MakeNodeAccelerator returns a NodeAccelerator for node with no GPUs.
func MakeNodeAccelerator(node string) *NodeAcceleratorWrapper {
	return &NodeAcceleratorWrapper{slicerv1alpha1.NodeAccelerator{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       slicerv1alpha1.NodeAcceleratorSpec{NodeName: node},
	}}
}

// GPUs adds n healthy MIG-enabled GPUs of a model, with UUIDs derived from
// the node name and index.
func (w *NodeAcceleratorWrapper) GPUs(model slicerv1alpha1.GPUModel, n int) *NodeAcceleratorWrapper {
	for i := 0; i < n; i++ {
		idx := int32(len(w.Status.GPUs))
		w.Status.GPUs = append(w.Status.GPUs, slicerv1alpha1.GPUStatus{
			Index:   idx,
			UUID:    GPUUUID(w.Name, int(idx)),
			Model:   model,
			MIGMode: slicerv1alpha1.MIGModeEnabled,
			Health:  slicerv1alpha1.GPUHealthy,
		})
	}
	return w
}

// Obj returns the object.
func (w *NodeAcceleratorWrapper) Obj() *slicerv1alpha1.NodeAccelerator { return &w.NodeAccelerator }

// GPUUUID is a deterministic, well-formed GPU UUID for a node and index.
func GPUUUID(node string, index int) string {
	var h uint32 = 2166136261
	for i := 0; i < len(node); i++ {
		h = (h ^ uint32(node[i])) * 16777619
	}
	return "GPU-" + hex8(h) + "-0000-4000-8000-" + hex8(uint32(index)) + "0000"
}

func hex8(v uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

// MakeNamespace returns a namespace object.
func MakeNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
