package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// GPUs numbers the GPUs after those already added and derives their UUIDs from the node
// name and index; Obj hands out copies the builder does not share.
func TestAcceleratorGPUs(t *testing.T) {
	b := Accelerator("n1").NodeName("n1").GPU("GPU-x", "A30-24GB").GPUs("H100-80GB", 2)
	na := b.Obj()
	var got []slicerv1alpha1.GPUStatus
	for _, g := range na.Status.GPUs {
		got = append(got, slicerv1alpha1.GPUStatus{Index: g.Index, UUID: g.UUID, Model: g.Model})
	}
	want := []slicerv1alpha1.GPUStatus{
		{Index: 0, UUID: "GPU-x", Model: "A30-24GB"},
		{Index: 1, UUID: GPUUUID("n1", 1), Model: "H100-80GB"},
		{Index: 2, UUID: GPUUUID("n1", 2), Model: "H100-80GB"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GPUs (-want +got):\n%s", d)
	}
	if na.Spec.NodeName != "n1" || na.Status.GPUs[2].MIGMode != slicerv1alpha1.MIGModeEnabled || na.Status.GPUs[2].Health != slicerv1alpha1.GPUHealthy {
		t.Errorf("spec or GPU state: %+v", na)
	}
	na.Status.GPUs[0].UUID = "changed"
	if b.Obj().Status.GPUs[0].UUID != "GPU-x" {
		t.Error("Obj shares the builder's GPUs")
	}
}

// The UUIDs are stable (the value framework.GPUUUID gave before it moved here): suites and
// goldens name them.
func TestGPUUUID(t *testing.T) {
	if got, want := GPUUUID("node-1", 3), "GPU-54c43383-0000-4000-8000-000000030000"; got != want {
		t.Errorf("GPUUUID = %s, want %s", got, want)
	}
	if GPUUUID("node-1", 0) == GPUUUID("node-2", 0) {
		t.Error("two nodes share a GPU UUID")
	}
}

func TestAllocation(t *testing.T) {
	got := Allocation("ns", "a").Typed().Pod("p", "uid").Node("n1").GPU("GPU-0").Profile("3g.40gb", 4, 4).
		Label("k", "v").Finalizer(slicerv1alpha1.AllocationFinalizer).ResourceVersion("7").Obj()
	want := &slicerv1alpha1.SliceAllocation{}
	want.APIVersion, want.Kind = "slicer.dev/v1alpha1", "SliceAllocation"
	want.Namespace, want.Name, want.ResourceVersion = "ns", "a", "7"
	want.Labels = map[string]string{"k": "v"}
	want.Finalizers = []string{slicerv1alpha1.AllocationFinalizer}
	want.Spec = slicerv1alpha1.SliceAllocationSpec{PodName: "p", PodUID: "uid", NodeName: "n1", GPUUUID: "GPU-0",
		Profile: "3g.40gb", Placement: &slicerv1alpha1.Placement{Start: 4, Size: 4}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("allocation (-want +got):\n%s", d)
	}
}
