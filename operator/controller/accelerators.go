package controller

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// acceleratorFacts is all the reconcile reads from one NodeAccelerator: its share of the
// status summary and the GPU models it reports. The NodeAccelerator watch passes only the
// writes that change them (acceleratorFactsChanged), not every slice or health report.
type acceleratorFacts struct {
	ready       bool
	gpus        int32
	slicesInUse int32
	// models of its GPUs, sorted and deduplicated; a GPU of no supported model
	// (empty model) adds none.
	models []string
}

// factsOf reads one NodeAccelerator's status.
func factsOf(na *slicerv1alpha1.NodeAccelerator) acceleratorFacts {
	f := acceleratorFacts{ready: meta.IsStatusConditionTrue(na.Status.Conditions, slicerv1alpha1.ConditionReady)}
	for _, g := range na.Status.GPUs {
		f.gpus++
		for _, sl := range g.Slices {
			if sl.State == slicerv1alpha1.SliceAllocated {
				f.slicesInUse++
			}
		}
		if m := string(g.Model); m != "" && !slices.Contains(f.models, m) {
			f.models = append(f.models, m)
		}
	}
	slices.Sort(f.models)
	return f
}

func (f acceleratorFacts) equal(o acceleratorFacts) bool {
	return f.ready == o.ready && f.gpus == o.gpus && f.slicesInUse == o.slicesInUse && slices.Equal(f.models, o.models)
}

// summaryOf adds up the NodeAccelerators' facts into the Slicer's status summary.
func summaryOf(accels []acceleratorFacts) slicerv1alpha1.SlicerSummary {
	var sum slicerv1alpha1.SlicerSummary
	for _, f := range accels {
		sum.Nodes++
		if f.ready {
			sum.ReadyNodes++
		}
		sum.GPUs += f.gpus
		sum.SlicesInUse += f.slicesInUse
	}
	return sum
}

// clusterGPUModels is the set of GPU models the DeviceClasses are rendered for, sorted and
// deduplicated: the values of the nodes' slicer.dev/gpu-model labels (one model per node,
// from the NFD rule) together with every model the NodeAccelerators report, so that a node
// with GPUs of two models gets the classes of both. Names Slicer does not know stay in the
// set; render.ProfilesOfModels sets them apart.
func clusterGPUModels(nodeLabels []string, accels []acceleratorFacts) []string {
	var models []string
	add := func(m string) {
		if m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	for _, m := range nodeLabels {
		add(m)
	}
	for _, f := range accels {
		for _, m := range f.models {
			add(m)
		}
	}
	slices.Sort(models)
	return models
}

// acceleratorFactsChanged passes the creation and deletion of a NodeAccelerator and the
// updates that change its facts (the summary's counts or its GPU models).
func acceleratorFactsChanged() predicate.Funcs {
	facts := func(o client.Object) (acceleratorFacts, bool) {
		na, ok := o.(*slicerv1alpha1.NodeAccelerator)
		if !ok {
			return acceleratorFacts{}, false
		}
		return factsOf(na), true
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := facts(e.ObjectOld)
			cur, okNew := facts(e.ObjectNew)
			return !okOld || !okNew || !old.equal(cur)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
