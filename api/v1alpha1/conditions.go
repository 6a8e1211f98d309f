package v1alpha1

// Condition types of a Slicer: one per component, plus the standard summary
// conditions. Each carries the observedGeneration of the spec it describes.
const (
	// ConditionAvailable is True when pods can get MIG slices: the
	// Kubernetes minor is supported, the node labelling the spec asks for
	// is in place (NodeFeatureRuleReady), the driver where the Slicer loads
	// one, the webhook, scheduler and agent are available. Its reason is
	// that of the most telling blocker (UnsupportedKubernetesVersion,
	// DependencyMissing, ApplyFailed, RollingOut). Optional conditions
	// (MonitoringReady) do not affect it.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while a component is being rolled out.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when a component failed or cannot be
	// applied, the Kubernetes minor is unsupported, or a dependency the
	// spec requires is missing; a missing optional one only is not.
	ConditionDegraded = "Degraded"

	// ConditionNodeFeatureRuleReady is True once the NFD NodeFeatureRule is
	// applied, or (reason Disabled) when spec.nodeSelection.nodeFeatureRule
	// opts out of NFD; False with DependencyMissing when NFD is needed and
	// not installed.
	ConditionNodeFeatureRuleReady = "NodeFeatureRuleReady"
	// ConditionDriverReady is True once the driver is loaded on the GPU nodes
	// (KMM mode), or always in Preinstalled and Emulated modes.
	ConditionDriverReady = "DriverReady"
	// ConditionSchedulerAvailable is True when the scheduler Deployment is available.
	ConditionSchedulerAvailable = "SchedulerAvailable"
	// ConditionWebhookAvailable is True when the webhook is available and registered.
	ConditionWebhookAvailable = "WebhookAvailable"
	// ConditionAgentAvailable is True when the agent runs on every selected node.
	ConditionAgentAvailable = "AgentAvailable"
	// ConditionMonitoringReady is True once the enabled monitoring objects
	// are applied; False with DependencyMissing while the Prometheus
	// operator's CRDs are absent. Optional: it never makes Slicer
	// unavailable.
	ConditionMonitoringReady = "MonitoringReady"
	// ConditionKubernetesVersionSupported is True when the apiserver's minor
	// is one Slicer ships a scheduler build for; while False no scheduler
	// runs and pods that ask for MIG slices are rejected at admission.
	ConditionKubernetesVersionSupported = "KubernetesVersionSupported"
	// ConditionDeviceClassesReady (DRA frontend only) is True once the apiserver serves
	// partitionable devices and one DeviceClass per MIG profile of the cluster's GPUs is
	// applied; False with PartitionableDevicesOff when the apiserver drops counter
	// consumption, since the stock allocator would then hand out overlapping placements.
	ConditionDeviceClassesReady = "DeviceClassesReady"
	// ConditionSlicesReleased is set only while the Slicer is being deleted: False while
	// pods hold MIG slices (reason WaitingForPods under uninstall policy Wait, with the pods
	// named in the message; ReleasingSlices under Force, while the pods go and the agents
	// destroy their instances), True (AsExpected) once none does and the rest of the
	// teardown runs. Its lastTransitionTime to True starts the cleanup timeout.
	ConditionSlicesReleased = "SlicesReleased"
)

// Condition types of a NodeAccelerator, written by the node's agent.
const (
	// ConditionDriverNotReady is True when NVML cannot be used on the node.
	ConditionDriverNotReady = "DriverNotReady"
	// ConditionMIGDisabled is True when a MIG-capable GPU has MIG mode off.
	ConditionMIGDisabled = "MIGDisabled"
	// ConditionOwnershipConflict is True when another tool owns MIG on the
	// node: the nvidia.com/mig.config label of NVIDIA's MIG manager
	// (ForeignMIGManager), or another device plugin advertising nvidia.com/gpu
	// or nvidia.com/mig-* (ForeignDevicePlugin); the agent then refuses to
	// change MIG geometry there, and the message says how to give the node back.
	ConditionOwnershipConflict = "OwnershipConflict"
	// ConditionRuntimeBypass is True when a RuntimeClass selects the NVIDIA container runtime
	// the node's container runtime offers (NVIDIARuntimeClass): a pod naming it gets the GPUs
	// its NVIDIA_VISIBLE_DEVICES environment asks for, past Slicer. Reported, not enforced:
	// the message says how to close it (docs/install.md).
	ConditionRuntimeBypass = "RuntimeBypass"
	// ConditionUnrecognizedGPU is True when NVML reports MIG on a GPU that is no model of
	// internal/mig's tables (UnknownGPUModel), or whose PCI device id or name is a model's but
	// whose memory is not (GPUMemoryMismatch); the message names each such GPU. The agent makes
	// no slice on it, and the node's other GPUs are served as usual.
	ConditionUnrecognizedGPU = "UnrecognizedGPU"
	// ConditionReady is True when the agent manages the node's GPUs.
	ConditionReady = "Ready"
)

// Condition reasons (PascalCase, stable: tooling may match on them).
const (
	ReasonAsExpected         = "AsExpected"
	ReasonApplied            = "Applied"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonRollingOut         = "RollingOut"
	ReasonDisabled           = "Disabled"
	ReasonDependencyMissing  = "DependencyMissing"
	ReasonDriverLoading      = "DriverLoading"
	ReasonDriverPreinstalled = "DriverPreinstalled"
	ReasonEmulated           = "Emulated"
	ReasonNoNodes            = "NoNodes"
	ReasonNVMLUnavailable    = "NVMLUnavailable"
	ReasonMIGModeOff         = "MIGModeOff"
	ReasonForeignMIGManager  = "ForeignMIGManager"
	ReasonDeletionTimedOut   = "DeletionTimedOut"
	ReasonInvalidPlacement   = "InvalidPlacement"
	ReasonNVMLError          = "NVMLError"
	ReasonGPUNotFound        = "GPUNotFound"
	ReasonInUse              = "InUse"
	// ReasonGPUUnhealthy: the GPU (or the MIG instance) is unhealthy: an NVML error, an XID
	// that means it is broken, or a recovery action the driver asks for. An allocation on it
	// waits; a pod holding a device on it gets an Event with this reason.
	ReasonGPUUnhealthy = "GPUUnhealthy"
	// ReasonUnknownGPUModel: a MIG-capable GPU is no model Slicer knows (UnrecognizedGPU).
	ReasonUnknownGPUModel = "UnknownGPUModel"
	// ReasonGPUMemoryMismatch: a GPU's PCI device id or name is a model's, its memory is not
	// (UnrecognizedGPU).
	ReasonGPUMemoryMismatch = "GPUMemoryMismatch"
	// ReasonProfileNotSupported: the node's GPU or driver has no such MIG profile (a profile
	// newer than the driver, mig.Profile.MinDriver); the allocation fails.
	ReasonProfileNotSupported = "ProfileNotSupported"
	// ReasonMIGModeOn: the allocation holds a whole GPU (spec.wholeGPU), the GPU is in MIG mode,
	// and its mode policy does not let the agent switch it out (docs/gpu-modes.md); it fails.
	ReasonMIGModeOn = "MIGModeOn"
	// ReasonWaitingForPods: the Slicer's deletion waits for the pods that hold MIG slices
	// (uninstall policy Wait).
	ReasonWaitingForPods = "WaitingForPods"
	// ReasonReleasingSlices: the Slicer's deletion deletes the pods that hold MIG slices
	// and waits for the agents to release them (uninstall policy Force).
	ReasonReleasingSlices = "ReleasingSlices"
	// ReasonPluginNotServing: the agent's kubelet plugin (DRA frontend) is not serving.
	ReasonPluginNotServing = "PluginNotServing"
	// ReasonNotUsed: the component is not part of the selected frontend.
	ReasonNotUsed = "NotUsed"
	// ReasonPartitionableDevicesOff: the apiserver does not serve DRA partitionable devices.
	ReasonPartitionableDevicesOff = "PartitionableDevicesOff"
	// ReasonUnsupportedKubernetesVersion: the apiserver's minor is outside
	// the supported window (internal/kubeversion).
	ReasonUnsupportedKubernetesVersion = "UnsupportedKubernetesVersion"
	// ReasonForeignDevicePlugin: another device plugin advertises nvidia.com/gpu or
	// nvidia.com/mig-* on the node (OwnershipConflict).
	ReasonForeignDevicePlugin = "ForeignDevicePlugin"
	// ReasonNVIDIARuntimeClass: a RuntimeClass selects the node's NVIDIA runtime handler
	// (RuntimeBypass).
	ReasonNVIDIARuntimeClass = "NVIDIARuntimeClass"
	// ReasonRuntimeClassesUnreadable: the agent could not list the RuntimeClasses
	// (RuntimeBypass Unknown).
	ReasonRuntimeClassesUnreadable = "RuntimeClassesUnreadable"
)
