package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MIGMode is a GPU's MIG mode as NVML reports it.
// +kubebuilder:validation:Enum=Enabled;Disabled;EnabledPendingReset;DisabledPendingReset;NotSupported
type MIGMode string

const (
	MIGModeEnabled              MIGMode = "Enabled"
	MIGModeDisabled             MIGMode = "Disabled"
	MIGModeEnabledPendingReset  MIGMode = "EnabledPendingReset"
	MIGModeDisabledPendingReset MIGMode = "DisabledPendingReset"
	MIGModeNotSupported         MIGMode = "NotSupported"
)

// GPUHealth is whether a GPU can take new slices.
// +kubebuilder:validation:Enum=Healthy;Unhealthy
type GPUHealth string

const (
	GPUHealthy   GPUHealth = "Healthy"
	GPUUnhealthy GPUHealth = "Unhealthy"
)

// DriverState is the state of the NVIDIA driver on a node.
// +kubebuilder:validation:Enum=Ready;NotReady;Emulated
type DriverState string

const (
	DriverStateReady    DriverState = "Ready"
	DriverStateNotReady DriverState = "NotReady"
	DriverStateEmulated DriverState = "Emulated"
)

// SliceState is the state of a MIG instance on a GPU, as the agent sees it.
// +kubebuilder:validation:Enum=Allocated;Free;PendingDelete;Orphaned
type SliceState string

const (
	// SliceAllocated is held by a SliceAllocation (device-plugin frontend) or by an allocated
	// ResourceClaim (DRA frontend).
	SliceAllocated SliceState = "Allocated"
	// SliceFree exists and no allocation holds it (e.g. pre-created).
	SliceFree SliceState = "Free"
	// SlicePendingDelete is being destroyed.
	SlicePendingDelete SliceState = "PendingDelete"
	// SliceOrphaned exists, no allocation wants it, and it waits for its grace period.
	SliceOrphaned SliceState = "Orphaned"
)

// AllocationReference names the SliceAllocation that holds a slice.
type AllocationReference struct {
	// namespace of the SliceAllocation (and its pod).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the SliceAllocation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ClaimReference names the ResourceClaim whose allocation holds a slice (DRA frontend).
type ClaimReference struct {
	// namespace of the ResourceClaim.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the ResourceClaim.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the ResourceClaim, so a claim recreated under the same name is told apart.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid,omitempty"`
	// device is the DRA device name allocated to the claim (gpu-<index>-<profile>-at-<start>).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Device string `json:"device,omitempty"`
}

// MIGSlice is one MIG instance (GPU instance + compute instance) on a GPU.
// +kubebuilder:validation:XValidation:rule="!(has(self.allocation) && has(self.claim))",message="a slice is held by an allocation or by a claim, not both"
type MIGSlice struct {
	// profile of the GPU instance.
	// +required
	Profile MIGProfile `json:"profile"`

	// placement of the GPU instance.
	// +required
	Placement Placement `json:"placement"`

	// gpuInstanceID is NVML's GPU instance id.
	// +optional
	// +kubebuilder:validation:Minimum=0
	GPUInstanceID int32 `json:"gpuInstanceID,omitempty"`

	// computeInstanceID is NVML's compute instance id.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ComputeInstanceID int32 `json:"computeInstanceID,omitempty"`

	// migDeviceUUID is the MIG device's UUID (MIG-...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MIGDeviceUUID string `json:"migDeviceUUID,omitempty"`

	// state of the slice.
	// +required
	State SliceState `json:"state"`

	// allocation holding the slice, if any (device-plugin frontend).
	// +optional
	Allocation *AllocationReference `json:"allocation,omitempty"`

	// claim holding the slice, if any (DRA frontend).
	// +optional
	Claim *ClaimReference `json:"claim,omitempty"`

	// health of the slice: Unhealthy after an XID the driver confined to its GPU instance,
	// until the instance is destroyed; empty while healthy (the GPU's health covers its
	// slices too).
	// +optional
	Health GPUHealth `json:"health,omitempty"`

	// healthMessage says why the slice is Unhealthy.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	HealthMessage string `json:"healthMessage,omitempty"`
}

// GPUStatus is one physical GPU of the node.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Switching' || has(self.modeSwitch)",message="mode Switching needs modeSwitch: the mode the GPU is switching to and why it has not yet",fieldPath=".modeSwitch"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || !has(self.modeSwitch) || self.modeSwitch.targetMode != self.mode",message="modeSwitch.targetMode is the mode the GPU already has: a GPU does not switch to its own mode",fieldPath=".modeSwitch.targetMode"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'MIG' || self.migMode == 'Enabled'",message="mode MIG needs migMode Enabled: MIG slices exist only in MIG mode",fieldPath=".mode"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Whole' || self.migMode in ['Disabled', 'NotSupported']",message="mode Whole needs migMode Disabled or NotSupported: a GPU in MIG mode cannot be used whole",fieldPath=".mode"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Whole' || !has(self.slices) || size(self.slices) == 0",message="a Whole GPU has no MIG slices",fieldPath=".slices"
// +kubebuilder:validation:XValidation:rule="!has(self.resetAllowed) || !self.resetAllowed || (has(self.modePolicy) && self.modePolicy == 'Dynamic')",message="resetAllowed applies only to modePolicy Dynamic: a fixed mode never switches",fieldPath=".resetAllowed"
type GPUStatus struct {
	// index is NVML's device index.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	Index int32 `json:"index"`

	// uuid is the GPU's UUID (GPU-...).
	// +required
	// +kubebuilder:validation:MinLength=5
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^GPU-[0-9a-fA-F-]+$`
	UUID string `json:"uuid"`

	// model is the GPU model from internal/mig's tables; empty when the GPU
	// is not a supported MIG model.
	// +optional
	Model GPUModel `json:"model,omitempty"`

	// productName as NVML reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=96
	ProductName string `json:"productName,omitempty"`

	// memoryMiB is the GPU's total memory.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMiB int64 `json:"memoryMiB,omitempty"`

	// migMode is the current MIG mode.
	// +required
	MIGMode MIGMode `json:"migMode"`

	// mode is how the agent publishes the GPU: Whole (MIG mode off, as nvidia.com/gpu), MIG
	// (as MIG slices) or Switching (its MIG mode is being changed, see modeSwitch). Unset by
	// agents that predate GPU modes: those publish a GPU with migMode Enabled as MIG slices
	// and no other GPU (docs/gpu-modes.md).
	// +optional
	Mode GPUMode `json:"mode,omitempty"`

	// modePolicy is the mode policy of the Slicer's spec.gpuModes that the agent applies to
	// this GPU (the first policy selecting it by model and node labels): Dynamic, MIG or
	// Whole; MIG when no policy selects it. Unset by agents that do not switch MIG modes: the
	// scheduler then never asks for a switch of the GPU (docs/gpu-modes.md).
	// +optional
	ModePolicy GPUModePolicyMode `json:"modePolicy,omitempty"`

	// resetAllowed: the GPU's policy allows a GPU reset for a change of its MIG mode
	// (allowReset), which A100 and A30 need. Only with modePolicy Dynamic.
	// +optional
	ResetAllowed bool `json:"resetAllowed,omitempty"`

	// modeSwitch is the change of the GPU's MIG mode that has not taken effect: Pending while
	// the agent waits for it, Failed once given up. Unset when no change is under way.
	// +optional
	ModeSwitch *GPUModeSwitch `json:"modeSwitch,omitempty"`

	// health of the GPU: Unhealthy when an NVML call on it failed, after an XID that means
	// the GPU is broken (an application's fault does not count), or while the driver asks for
	// a recovery action (a GPU reset, a reboot). No new slice is placed on an unhealthy GPU.
	// +required
	Health GPUHealth `json:"health"`

	// healthMessage says why the GPU is Unhealthy: the NVML error, the XID, the recovery action.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	HealthMessage string `json:"healthMessage,omitempty"`

	// slices are the MIG instances that exist on the GPU.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Slices []MIGSlice `json:"slices,omitempty"`
}

// NodeAcceleratorSpec identifies the node.
type NodeAcceleratorSpec struct {
	// nodeName is the node this object describes; it equals metadata.name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`
}

// NodeAcceleratorStatus is what the node's agent observed.
type NodeAcceleratorStatus struct {
	// driver state on the node.
	// +optional
	Driver DriverState `json:"driver,omitempty"`

	// driverVersion as NVML reports it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DriverVersion string `json:"driverVersion,omitempty"`

	// gpus on the node.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	// +kubebuilder:validation:MaxItems=16
	GPUs []GPUStatus `json:"gpus,omitempty"`

	// conditions: Ready, DriverNotReady, MIGDisabled, OwnershipConflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// NodeAccelerator is the MIG state of one node, written only by that node's
// agent; the scheduler builds its snapshot from these.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nacc
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driver`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.gpus[0].model`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName",message="metadata.name must equal spec.nodeName",fieldPath=`.spec.nodeName`
type NodeAccelerator struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec identifies the node.
	// +required
	Spec NodeAcceleratorSpec `json:"spec"`

	// status is what the agent observed.
	// +optional
	Status NodeAcceleratorStatus `json:"status,omitempty"`
}

// NodeAcceleratorList is a list of NodeAccelerators.
// +kubebuilder:object:root=true
type NodeAcceleratorList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeAccelerator `json:"items"`
}
