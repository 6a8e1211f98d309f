package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/builder"
)

func factsOfAll(nas ...*slicerv1alpha1.NodeAccelerator) []acceleratorFacts {
	var out []acceleratorFacts
	for _, na := range nas {
		out = append(out, factsOf(na))
	}
	return out
}

// The DeviceClasses cover the union of the node labels and the NodeAccelerators' models:
// a node labelled with one model whose GPUs include another gets both.
func TestClusterGPUModels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []string
		accels []acceleratorFacts
		want   []string
	}{
		{name: "nothing", want: nil},
		{name: "labels only, deduplicated and sorted", labels: []string{"H100-80GB", "A100-40GB", "H100-80GB"}, want: []string{"A100-40GB", "H100-80GB"}},
		{name: "NodeAccelerators only (no NFD label)", accels: factsOfAll(builder.Accelerator("n1").GPU("n1-gpu", "A30-24GB").GPU("n1-gpu", "A30-24GB").Obj()), want: []string{"A30-24GB"}},
		{
			name:   "a labelled node whose GPUs are of two models",
			labels: []string{"H100-80GB"},
			accels: factsOfAll(builder.Accelerator("n1").GPU("n1-gpu", "H100-80GB").GPU("n1-gpu", "A100-40GB").Obj()),
			want:   []string{"A100-40GB", "H100-80GB"},
		},
		{
			name:   "GPUs of no supported model add nothing; unknown label values are kept for ProfilesOfModels to report",
			labels: []string{"", "Z9-1GB"},
			accels: factsOfAll(builder.Accelerator("n1").GPU("n1-gpu", "").Obj(), builder.Accelerator("n2").Obj()),
			want:   []string{"Z9-1GB"},
		},
		{
			name:   "models from several NodeAccelerators",
			labels: []string{"A100-80GB"},
			accels: factsOfAll(builder.Accelerator("n1").GPU("n1-gpu", "H100-80GB").Obj(), builder.Accelerator("n2").GPU("n2-gpu", "A30-24GB").GPU("n2-gpu", "H100-80GB").Obj()),
			want:   []string{"A100-80GB", "A30-24GB", "H100-80GB"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, clusterGPUModels(tc.labels, tc.accels)); diff != "" {
				t.Errorf("clusterGPUModels(%q, ...) (-want +got):\n%s", tc.labels, diff)
			}
		})
	}
}

func TestSummaryOf(t *testing.T) {
	ready := builder.Accelerator("n1").GPU("n1-gpu", "H100-80GB").GPU("n1-gpu", "H100-80GB").Obj()
	ready.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	ready.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{
		{Profile: "3g.40gb", State: slicerv1alpha1.SliceAllocated},
		{Profile: "1g.10gb", State: slicerv1alpha1.SliceFree},
	}
	ready.Status.GPUs[1].Slices = []slicerv1alpha1.MIGSlice{{Profile: "7g.80gb", State: slicerv1alpha1.SliceAllocated}}
	got := summaryOf(factsOfAll(ready, builder.Accelerator("n2").GPU("n2-gpu", "A30-24GB").Obj()))
	want := slicerv1alpha1.SlicerSummary{Nodes: 2, ReadyNodes: 1, GPUs: 3, SlicesInUse: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summaryOf (-want +got):\n%s", diff)
	}
}

// The NodeAccelerator watch reconciles when a GPU model or a summary count changes, not on
// the writes that change neither.
func TestAcceleratorFactsChanged(t *testing.T) {
	base := func() *slicerv1alpha1.NodeAccelerator {
		na := builder.Accelerator("n1").GPU("n1-gpu", "H100-80GB").GPU("n1-gpu", "A100-40GB").Obj()
		na.Status.Conditions = []metav1.Condition{{Type: slicerv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}
		return na
	}
	for _, tc := range []struct {
		name   string
		change func(*slicerv1alpha1.NodeAccelerator)
		want   bool
	}{
		{"no change", func(*slicerv1alpha1.NodeAccelerator) {}, false},
		{"health, memory and condition message", func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs[0].Health = slicerv1alpha1.GPUUnhealthy
			na.Status.GPUs[1].MemoryMiB = 40960
			na.Status.Conditions[0].Message = "all slices reconciled"
		}, false},
		{"a free slice appears", func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "1g.10gb", State: slicerv1alpha1.SliceFree}}
		}, false},
		{"the second GPU's model is gone", func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs[1].Model = "" }, true},
		{"the second GPU becomes another model", func(na *slicerv1alpha1.NodeAccelerator) { na.Status.GPUs[1].Model = "A30-24GB" }, true},
		{"a GPU of a model already there is added", func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs = append(na.Status.GPUs, slicerv1alpha1.GPUStatus{Index: 2, Model: "H100-80GB"})
		}, true},
		{"a slice is allocated", func(na *slicerv1alpha1.NodeAccelerator) {
			na.Status.GPUs[0].Slices = []slicerv1alpha1.MIGSlice{{Profile: "1g.10gb", State: slicerv1alpha1.SliceAllocated}}
		}, true},
		{"not Ready any more", func(na *slicerv1alpha1.NodeAccelerator) { na.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := acceleratorFactsChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.want {
				t.Errorf("Update = %t, want %t", got, tc.want)
			}
		})
	}
	p := acceleratorFactsChanged()
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("the creation and deletion of a NodeAccelerator must reconcile")
	}
}
