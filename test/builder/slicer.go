package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// AcceleratorBuilder builds a NodeAccelerator; every method returns the builder.
type AcceleratorBuilder struct {
	na slicerv1alpha1.NodeAccelerator
}

// Accelerator starts a NodeAccelerator named name, with no spec and no GPUs.
func Accelerator(name string) *AcceleratorBuilder {
	return &AcceleratorBuilder{na: slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Typed sets apiVersion and kind, as an object read from the API carries them.
func (b *AcceleratorBuilder) Typed() *AcceleratorBuilder {
	b.na.TypeMeta = metav1.TypeMeta{APIVersion: slicerv1alpha1.GroupVersion.String(), Kind: "NodeAccelerator"}
	return b
}

// NodeName sets spec.nodeName.
func (b *AcceleratorBuilder) NodeName(node string) *AcceleratorBuilder {
	b.na.Spec.NodeName = node
	return b
}

// GPU adds a healthy, MIG-enabled GPU with the next index.
func (b *AcceleratorBuilder) GPU(uuid string, model slicerv1alpha1.GPUModel) *AcceleratorBuilder {
	b.na.Status.GPUs = append(b.na.Status.GPUs, slicerv1alpha1.GPUStatus{
		Index:   int32(len(b.na.Status.GPUs)),
		UUID:    uuid,
		Model:   model,
		MIGMode: slicerv1alpha1.MIGModeEnabled,
		Health:  slicerv1alpha1.GPUHealthy,
	})
	return b
}

// GPUs adds n healthy, MIG-enabled GPUs of a model, their UUIDs GPUUUID(name, index).
func (b *AcceleratorBuilder) GPUs(model slicerv1alpha1.GPUModel, n int) *AcceleratorBuilder {
	for range n {
		b.GPU(GPUUUID(b.na.Name, len(b.na.Status.GPUs)), model)
	}
	return b
}

// Slices sets the slices of the GPU at index gpu, which must have been added.
func (b *AcceleratorBuilder) Slices(gpu int, slices ...slicerv1alpha1.MIGSlice) *AcceleratorBuilder {
	if gpu >= len(b.na.Status.GPUs) {
		panic("builder: Slices names a GPU not added")
	}
	b.na.Status.GPUs[gpu].Slices = slices
	return b
}

// Obj returns the NodeAccelerator (a copy: the builder can go on).
func (b *AcceleratorBuilder) Obj() *slicerv1alpha1.NodeAccelerator { return b.na.DeepCopy() }

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

// AllocationBuilder builds a SliceAllocation; every method returns the builder.
type AllocationBuilder struct {
	a slicerv1alpha1.SliceAllocation
}

// Allocation starts a SliceAllocation with only its namespace and name.
func Allocation(namespace, name string) *AllocationBuilder {
	return &AllocationBuilder{a: slicerv1alpha1.SliceAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}
}

// Typed sets apiVersion and kind, as an object read from the API carries them.
func (b *AllocationBuilder) Typed() *AllocationBuilder {
	b.a.TypeMeta = metav1.TypeMeta{APIVersion: slicerv1alpha1.GroupVersion.String(), Kind: "SliceAllocation"}
	return b
}

// Pod sets the holder pod's name and UID.
func (b *AllocationBuilder) Pod(name, uid string) *AllocationBuilder {
	b.a.Spec.PodName, b.a.Spec.PodUID = name, uid
	return b
}

// Node sets spec.nodeName.
func (b *AllocationBuilder) Node(name string) *AllocationBuilder {
	b.a.Spec.NodeName = name
	return b
}

// GPU sets the GPU UUID.
func (b *AllocationBuilder) GPU(uuid string) *AllocationBuilder {
	b.a.Spec.GPUUUID = uuid
	return b
}

// Profile sets the profile and its placement.
func (b *AllocationBuilder) Profile(p string, start, size int32) *AllocationBuilder {
	b.a.Spec.Profile = slicerv1alpha1.MIGProfile(p)
	b.a.Spec.Placement = &slicerv1alpha1.Placement{Start: start, Size: size}
	return b
}

// Label sets a label.
func (b *AllocationBuilder) Label(k, v string) *AllocationBuilder {
	b.a.Labels = with(b.a.Labels, k, v)
	return b
}

// Finalizer adds a finalizer.
func (b *AllocationBuilder) Finalizer(f string) *AllocationBuilder {
	b.a.Finalizers = append(b.a.Finalizers, f)
	return b
}

// ResourceVersion sets metadata.resourceVersion.
func (b *AllocationBuilder) ResourceVersion(rv string) *AllocationBuilder {
	b.a.ResourceVersion = rv
	return b
}

// Obj returns the SliceAllocation (a copy: the builder can go on).
func (b *AllocationBuilder) Obj() *slicerv1alpha1.SliceAllocation { return b.a.DeepCopy() }
