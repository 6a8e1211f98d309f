package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AllocationState is the life cycle of a SliceAllocation, written by the agent.
// +kubebuilder:validation:Enum=Pending;Creating;Ready;Releasing;Failed
type AllocationState string

const (
	// AllocationPending: the agent waits before it can realize the slice (another MIG
	// manager owns the node, or a slice no allocation holds is in the way); reason says
	// which. An allocation the agent has not written yet has no state at all.
	AllocationPending AllocationState = "Pending"
	// AllocationCreating: creating the GPU or compute instance, or writing the slice's CDI
	// spec, failed and the agent retries; reason and message say why. The agent writes no
	// status before its first attempt (the first status of a slice that works is Ready);
	// agents up to v0.1.0 also wrote Creating before every attempt, and such objects stay
	// valid.
	AllocationCreating AllocationState = "Creating"
	// AllocationReady: the MIG device exists and is advertised to the kubelet. It is
	// normally the first status the agent writes.
	AllocationReady AllocationState = "Ready"
	// AllocationReleasing: the allocation is being deleted and the agent cannot destroy its
	// MIG device yet (in use, or NVML failed); reason says why. A release that succeeds is
	// not written: the allocation goes.
	AllocationReleasing AllocationState = "Releasing"
	// AllocationFailed: the slice could not be realized; reason says why.
	AllocationFailed AllocationState = "Failed"
)

// AllocationFinalizer keeps an allocation until the agent of its node has destroyed its
// slice, or found it holds none. The scheduler sets it when it creates the allocation, so
// the hand-off costs no extra write; the agent adds it to an allocation that lacks it
// (created by a scheduler up to v0.1.0) before it realizes the slice. Only the agent
// removes it (docs/design/handoff.md).
const AllocationFinalizer = "slicer.dev/slice-release"

// SliceAllocationSpec is one slice a pod holds; written only by the scheduler
// (PreBind) and immutable.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: the scheduler commits an allocation once"
// +kubebuilder:validation:XValidation:rule="has(self.wholeGPU) && self.wholeGPU ? !has(self.profile) && !has(self.placement) : has(self.profile) && has(self.placement)",message="a slice names its profile and placement; a whole GPU (wholeGPU true) names neither"
type SliceAllocationSpec struct {
	// podName of the pod that holds the slice (in this namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName"`

	// podUID of the pod that holds the slice.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	PodUID string `json:"podUID"`

	// nodeName the pod is bound to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`

	// wholeGPU: the pod holds the whole GPU, MIG mode off (nvidia.com/gpu), and the
	// allocation names no profile nor placement (docs/design/whole-gpus.md). False for a
	// MIG slice.
	// +optional
	WholeGPU bool `json:"wholeGPU,omitempty"`

	// gpuUUID of the GPU the slice is placed on (of the GPU itself, for a whole GPU).
	// +required
	// +kubebuilder:validation:MinLength=5
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^GPU-[0-9a-fA-F-]+$`
	GPUUUID string `json:"gpuUUID"`

	// profile of the slice; unset for a whole GPU.
	// +optional
	Profile MIGProfile `json:"profile,omitempty"`

	// placement of the GPU instance on the GPU; unset for a whole GPU.
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// index of this slice (or whole GPU) among the pod's slices (or whole GPUs), 0-based.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Index int32 `json:"index,omitempty"`
}

// SliceAllocationStatus is the realization of the slice, written only by the agent.
type SliceAllocationStatus struct {
	// state of the slice, written by the node agent: empty until its first write, which
	// is Ready when the slice is realized at the first attempt. Creating means an attempt
	// failed and is retried (objects from v0.1.0 may also carry it from before the work).
	// +optional
	State AllocationState `json:"state,omitempty"`

	// reason is a PascalCase reason for Failed (and transient trouble).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// message explains the state to a human.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// migDeviceUUID of the realized MIG device (MIG-...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MIGDeviceUUID string `json:"migDeviceUUID,omitempty"`

	// gpuInstanceID is NVML's GPU instance id.
	// +optional
	// +kubebuilder:validation:Minimum=0
	GPUInstanceID *int32 `json:"gpuInstanceID,omitempty"`

	// computeInstanceID is NVML's compute instance id.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ComputeInstanceID *int32 `json:"computeInstanceID,omitempty"`

	// actualPlacement is where the device handed to the pod really sits when
	// the kubelet gave the pod another realized slice of the same profile.
	// +optional
	ActualPlacement *Placement `json:"actualPlacement,omitempty"`

	// actualGPUUUID is the GPU the device handed to the pod really sits on
	// when the kubelet gave the pod a realized slice on another GPU than
	// spec.gpuUUID; empty when it is spec.gpuUUID.
	// +optional
	// +kubebuilder:validation:MinLength=5
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^GPU-[0-9a-fA-F-]+$`
	ActualGPUUUID string `json:"actualGPUUUID,omitempty"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SliceAllocation is one MIG slice, or one whole GPU (spec.wholeGPU), held by one pod: the
// durable hand-off from the scheduler to the node agent. Its owner reference to the pod lets
// the garbage collector remove it once the pod is gone; the agent's finalizer, set at
// creation, keeps it until the slice is destroyed.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=salloc
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.podName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="GPU",type=string,JSONPath=`.spec.gpuUUID`,priority=1
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profile`
// +kubebuilder:printcolumn:name="Whole",type=boolean,JSONPath=`.spec.wholeGPU`,priority=1
// +kubebuilder:printcolumn:name="Start",type=integer,JSONPath=`.spec.placement.start`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Device",type=string,JSONPath=`.status.migDeviceUUID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SliceAllocation struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the scheduler's decision.
	// +required
	Spec SliceAllocationSpec `json:"spec"`

	// status is the agent's realization.
	// +optional
	Status SliceAllocationStatus `json:"status,omitempty"`
}

// SliceAllocationList is a list of SliceAllocations.
// +kubebuilder:object:root=true
type SliceAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SliceAllocation `json:"items"`
}
