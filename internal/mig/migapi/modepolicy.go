package migapi

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// NoModePolicy is ModePolicy.Index when no policy of spec.gpuModes selects the GPU.
const NoModePolicy = -1

// ModePolicy is the policy of a Slicer's spec.gpuModes that applies to one GPU
// (docs/gpu-modes.md, "Which policy applies to a GPU").
type ModePolicy struct {
	// Mode is the selecting policy's mode; MIG when none selects the GPU, Whole for a GPU of
	// no MIG model.
	Mode slicerv1alpha1.GPUModePolicyMode
	// AllowReset is the selecting policy's allowReset (only ever true with Mode Dynamic).
	AllowReset bool
	// Index is the selecting policy's index in spec.gpuModes, NoModePolicy when none selects
	// the GPU or the GPU has no MIG model.
	Index int
	// NotMIGCapable: the GPU is of no MIG model, so it is always whole and no policy applies.
	NotMIGCapable bool
}

// ModePolicyFor is the policy of policies that applies to a GPU of model on a node labelled
// nodeLabels: the first that selects it (by model and by nodeSelector, both where both are
// set), MIG mode when none does. A model that is no MIG model of internal/mig's tables ("" for
// a GPU without MIG) is always whole. The error is a nodeSelector that does not convert to a
// labels.Selector (the CRD's rules keep that from happening); no policy is chosen then, since
// the one that failed might have been the first to select the GPU.
func ModePolicyFor(policies []slicerv1alpha1.GPUModePolicy, model slicerv1alpha1.GPUModel, nodeLabels map[string]string) (ModePolicy, error) {
	if _, err := mig.ParseModel(string(model)); err != nil {
		return ModePolicy{Mode: slicerv1alpha1.GPUModePolicyWhole, Index: NoModePolicy, NotMIGCapable: true}, nil
	}
	set := labels.Set(nodeLabels)
	for i := range policies {
		p := &policies[i]
		if p.Model != "" && p.Model != model {
			continue
		}
		if p.NodeSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(p.NodeSelector.LabelSelector())
			if err != nil {
				return ModePolicy{}, fmt.Errorf("spec.gpuModes[%d].nodeSelector: %w", i, err)
			}
			if !sel.Matches(set) {
				continue
			}
		}
		return ModePolicy{Mode: p.Mode, AllowReset: p.AllowReset && p.Mode == slicerv1alpha1.GPUModePolicyDynamic, Index: i}, nil
	}
	return ModePolicy{Mode: slicerv1alpha1.GPUModePolicyMIG, Index: NoModePolicy}, nil
}
