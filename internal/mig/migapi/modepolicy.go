package migapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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

// GPUModesFlagName is the agent's flag that takes GPUModesFlag's value.
const GPUModesFlagName = "gpu-modes"

// GPUModesFlag is spec.gpuModes as the agent's --gpu-modes flag takes it: compact JSON, in
// the API's own field names. "" for an empty list (the operator then renders no flag, so that
// a DaemonSet of a Slicer without GPU modes does not change).
func GPUModesFlag(policies []slicerv1alpha1.GPUModePolicy) (string, error) {
	if len(policies) == 0 {
		return "", nil
	}
	b, err := json.Marshal(policies)
	if err != nil {
		return "", fmt.Errorf("spec.gpuModes: %w", err)
	}
	return string(b), nil
}

// ParseGPUModesFlag reads GPUModesFlag's value ("" is no policy). It refuses what the CRD
// refuses of a policy on its own: an unknown field, more than MaxGPUModePolicies policies, a
// mode other than Dynamic, MIG and Whole, a model that is no MIG model, a policy selecting
// nothing, allowReset without Dynamic, and a nodeSelector that is no label selector.
func ParseGPUModesFlag(s string) ([]slicerv1alpha1.GPUModePolicy, error) {
	if s == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var policies []slicerv1alpha1.GPUModePolicy
	if err := dec.Decode(&policies); err != nil {
		return nil, fmt.Errorf("not a JSON list of GPU mode policies: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a JSON list of GPU mode policies: text after the list")
	}
	if len(policies) > slicerv1alpha1.MaxGPUModePolicies {
		return nil, fmt.Errorf("%d policies, at most %d", len(policies), slicerv1alpha1.MaxGPUModePolicies)
	}
	for i, p := range policies {
		switch p.Mode {
		case slicerv1alpha1.GPUModePolicyDynamic, slicerv1alpha1.GPUModePolicyMIG, slicerv1alpha1.GPUModePolicyWhole:
		default:
			return nil, fmt.Errorf("policy %d: mode %q: want Dynamic, MIG or Whole", i, p.Mode)
		}
		if p.Model != "" {
			if _, err := mig.ParseModel(string(p.Model)); err != nil {
				return nil, fmt.Errorf("policy %d: %w", i, err)
			}
		}
		if p.Model == "" && p.NodeSelector == nil {
			return nil, fmt.Errorf("policy %d selects no GPU: set model, nodeSelector or both", i)
		}
		if p.AllowReset && p.Mode != slicerv1alpha1.GPUModePolicyDynamic {
			return nil, fmt.Errorf("policy %d: allowReset applies only to mode Dynamic", i)
		}
		if p.NodeSelector != nil {
			if _, err := metav1.LabelSelectorAsSelector(p.NodeSelector.LabelSelector()); err != nil {
				return nil, fmt.Errorf("policy %d: nodeSelector: %w", i, err)
			}
		}
	}
	return policies, nil
}
