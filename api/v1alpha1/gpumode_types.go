package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file is the API of issue 40's GPU modes: which GPUs Slicer may switch between a whole
// GPU (MIG mode off) and MIG slices (spec.gpuModes), and what a node's agent reports of each
// GPU's mode (NodeAccelerator status.gpus[].mode and .modeSwitch). docs/gpu-modes.md is the
// user's guide: the operator renders spec.gpuModes to the device-plugin agents, which switch
// an empty GPU's MIG mode by it.

// MaxGPUModePolicies bounds spec.gpuModes (its MaxItems marker carries the same number, which
// TestGPUModesBoundsMatchCRD checks). Small, so that the list's CEL rules, which compare the
// policies pairwise, stay within the apiserver's cost budget.
const MaxGPUModePolicies = 8

// GPUModePolicyMode is what Slicer may do with the MIG mode of the GPUs a policy selects.
// +kubebuilder:validation:Enum=Dynamic;MIG;Whole
type GPUModePolicyMode string

const (
	// GPUModePolicyDynamic: Slicer publishes the GPU whole or as MIG slices and switches its
	// MIG mode, only while the GPU is empty, when the scheduler's choice needs the other mode.
	GPUModePolicyDynamic GPUModePolicyMode = "Dynamic"
	// GPUModePolicyMIG: the GPU is always in MIG mode and published as MIG slices; what every
	// GPU is when spec.gpuModes is empty.
	GPUModePolicyMIG GPUModePolicyMode = "MIG"
	// GPUModePolicyWhole: the GPU is always a whole GPU, MIG mode off, published as
	// nvidia.com/gpu.
	GPUModePolicyWhole GPUModePolicyMode = "Whole"
)

// GPUModePolicy selects GPUs, by model, by the labels of their node, or both, and says which
// MIG mode they may have.
// +kubebuilder:validation:XValidation:rule="has(self.model) || has(self.nodeSelector)",message="a policy must select GPUs: set model, nodeSelector or both"
// +kubebuilder:validation:XValidation:rule="!has(self.allowReset) || !self.allowReset || self.mode == 'Dynamic'",message="allowReset applies only to mode Dynamic: a fixed mode never switches, so it never resets a GPU",fieldPath=".allowReset"
type GPUModePolicy struct {
	// model selects the GPUs of this model (a GPU's model is the one its NodeAccelerator
	// reports in status.gpus[].model). Only MIG-capable models are accepted: a GPU without
	// MIG is always a whole GPU. Unset, the policy selects GPUs of every MIG-capable model.
	// +optional
	Model GPUModel `json:"model,omitempty"`

	// nodeSelector selects the GPUs of the nodes whose labels it matches. Unset, the policy
	// selects GPUs on every node Slicer manages. With model too, a GPU must match both.
	// +optional
	NodeSelector *GPUNodeSelector `json:"nodeSelector,omitempty"`

	// mode is Dynamic (Slicer switches an empty GPU between whole and MIG on demand), MIG
	// (always MIG slices) or Whole (always a whole GPU, MIG mode off).
	// +required
	Mode GPUModePolicyMode `json:"mode"`

	// allowReset lets Slicer reset a GPU whose MIG mode change takes effect only after a GPU
	// reset (A100 and A30, by NVIDIA's MIG user guide; Hopper and later switch without one,
	// and allowReset changes nothing for them). Default false: such a GPU keeps the mode its
	// node came up with, and a switch the scheduler asks for fails with reason
	// ResetNotAllowed. Only with mode Dynamic.
	// +optional
	AllowReset bool `json:"allowReset,omitempty"`
}

// GPUNodeSelector is a label selector on nodes, written as a metav1.LabelSelector is (the same
// fields and meaning) but bounded: metav1.LabelSelector has no bounds, and the apiserver refuses
// the CEL rules that check its operators and values inside spec.gpuModes, estimating their cost
// over that unbounded list at about twice its budget (TestCRDsPassTheAPIServersValidation).
// LabelSelector converts it.
type GPUNodeSelector struct {
	// matchLabels: the node has every one of these labels, with these values.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && size(self[k]) <= 63)",message="label keys have at most 317 characters, values at most 63"
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// matchExpressions: the node's labels meet every one of these requirements.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	MatchExpressions []GPUNodeSelectorRequirement `json:"matchExpressions,omitempty"`
}

// GPUNodeSelectorRequirement is one requirement on a node's labels, as a
// metav1.LabelSelectorRequirement is.
// +kubebuilder:validation:XValidation:rule="self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) == 0) : (has(self.values) && size(self.values) > 0)",message="values must be empty for Exists and DoesNotExist, and non-empty for In and NotIn",fieldPath=".values"
type GPUNodeSelectorRequirement struct {
	// key is the label key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Key string `json:"key"`

	// operator is In, NotIn, Exists or DoesNotExist.
	// +required
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`

	// values: the label's values for In and NotIn; none for Exists and DoesNotExist.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	Values []string `json:"values,omitempty"`
}

// LabelSelector is the selector as a metav1.LabelSelector, for labels.Selector and the
// helpers of k8s.io/apimachinery/pkg/apis/meta/v1. Nil for a nil selector.
func (s *GPUNodeSelector) LabelSelector() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			out.MatchLabels[k] = v
		}
	}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.Key, Operator: r.Operator, Values: append([]string(nil), r.Values...),
		})
	}
	return out
}

// GPUMode is how a node's agent publishes a GPU.
// +kubebuilder:validation:Enum=Whole;MIG;Switching
type GPUMode string

const (
	// GPUModeWhole: MIG mode is off and the GPU is published whole (nvidia.com/gpu).
	GPUModeWhole GPUMode = "Whole"
	// GPUModeMIG: MIG mode is on and the GPU is published as MIG slices.
	GPUModeMIG GPUMode = "MIG"
	// GPUModeSwitching: the GPU's MIG mode is being changed; it is published neither way
	// until the change has taken effect. modeSwitch says to what and where it stands.
	GPUModeSwitching GPUMode = "Switching"
)

// GPUModeSwitchPhase is where a change of a GPU's MIG mode stands.
// +kubebuilder:validation:Enum=Pending;Failed
type GPUModeSwitchPhase string

const (
	// GPUModeSwitchPending: the change has been asked for and has not taken effect yet.
	GPUModeSwitchPending GPUModeSwitchPhase = "Pending"
	// GPUModeSwitchFailed: the change was given up; the GPU keeps its mode.
	GPUModeSwitchFailed GPUModeSwitchPhase = "Failed"
)

// GPUModeSwitchReason says why a change of a GPU's MIG mode has not taken effect.
// +kubebuilder:validation:Enum=HeldByClient;ResetRequired;ResetNotAllowed;InstancesPresent;NVMLError
type GPUModeSwitchReason string

const (
	// GPUModeSwitchHeldByClient: a client holds the GPU (a process, DCGM, a monitoring
	// daemon), and the driver refuses the change or keeps it pending until it lets go
	// (nvmlDeviceSetMigMode's activation status NVML_ERROR_IN_USE, go-nvml's nvml.h).
	GPUModeSwitchHeldByClient GPUModeSwitchReason = "HeldByClient"
	// GPUModeSwitchResetRequired: the change is pending until a GPU reset (A100, A30; or a
	// VM reboot where the reset is not exposed, NVML_ERROR_RESET_REQUIRED in go-nvml's nvml.h),
	// which the policy allows and which has not been done yet.
	GPUModeSwitchResetRequired GPUModeSwitchReason = "ResetRequired"
	// GPUModeSwitchResetNotAllowed: the change needs a GPU reset and the GPU's policy does
	// not allow one (allowReset false).
	GPUModeSwitchResetNotAllowed GPUModeSwitchReason = "ResetNotAllowed"
	// GPUModeSwitchInstancesPresent: MIG instances still exist on the GPU; MIG mode is turned
	// off only on an empty GPU.
	GPUModeSwitchInstancesPresent GPUModeSwitchReason = "InstancesPresent"
	// GPUModeSwitchNVMLError: an NVML call failed; message holds NVML's error.
	GPUModeSwitchNVMLError GPUModeSwitchReason = "NVMLError"
)

// GPUModeSwitch is a change of a GPU's MIG mode that has not taken effect.
// +kubebuilder:validation:XValidation:rule="self.targetMode != 'Switching'",message="targetMode is Whole or MIG: the mode the GPU is switching to",fieldPath=".targetMode"
type GPUModeSwitch struct {
	// targetMode is the mode the GPU is switching to: Whole or MIG.
	// +required
	TargetMode GPUMode `json:"targetMode"`

	// phase is Pending (asked for, not in effect yet) or Failed (given up: the GPU keeps its
	// mode).
	// +required
	Phase GPUModeSwitchPhase `json:"phase"`

	// reason says why the change has not taken effect.
	// +required
	Reason GPUModeSwitchReason `json:"reason"`

	// message says it for people: the client holding the GPU, the NVML error.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`

	// lastTransitionTime is when phase or reason last changed.
	// +required
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}
