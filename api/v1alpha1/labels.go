package v1alpha1

import (
	"slices"
	"strings"
)

// Labels and annotations Slicer's components agree on.
const (
	// LabelNode is set on every SliceAllocation to its spec.nodeName, so a
	// node's agent can watch only its own allocations.
	LabelNode = "slicer.dev/node"
	// LabelPodUID is set on every SliceAllocation to its pod's UID.
	LabelPodUID = "slicer.dev/pod-uid"
	// LabelComponent is set on the pods of Slicer's own components (operator,
	// scheduler, webhook, agent); the webhook never intercepts such pods.
	LabelComponent = "slicer.dev/component"
	// LabelTranslateNVIDIAResources on a namespace, with value "disabled",
	// turns off the rewriting of nvidia.com/mig-* requests there (for
	// namespaces served by NVIDIA's static MIG device plugin).
	LabelTranslateNVIDIAResources = "slicer.dev/translate-nvidia-resources"
	// LabelMIGCapable is set by the NFD rule on nodes with a MIG-capable GPU.
	LabelMIGCapable = "slicer.dev/mig-capable"
	// LabelGPUModel is set by the NFD rule to the node's GPU model.
	LabelGPUModel = "slicer.dev/gpu-model"
	// LabelNVIDIAMIGConfig is the label of NVIDIA's MIG manager; a node that
	// carries it is owned by that tool and the agent refuses to manage MIG there.
	LabelNVIDIAMIGConfig = "nvidia.com/mig.config"
	// LabelGPUOperatorDeployDevicePlugin and LabelGPUOperatorDeployMIGManager are the NVIDIA
	// GPU operator's per-node deploy labels of its device plugin and MIG manager: their
	// DaemonSets select nodes where the label is "true", and the GPU operator keeps a value
	// it finds (docs/install.md). In Preinstalled mode, where the GPU operator is installed,
	// Slicer's operator sets both to "false" on the nodes Slicer manages.
	LabelGPUOperatorDeployDevicePlugin = "nvidia.com/gpu.deploy.device-plugin"
	LabelGPUOperatorDeployMIGManager   = "nvidia.com/gpu.deploy.mig-manager"
	// AnnotationGPUOperatorLabels records, on a node where Slicer's operator set the GPU
	// operator's deploy labels, what they were before (JSON: label key to previous value,
	// null for absent), so that uninstalling Slicer puts back what was there.
	AnnotationGPUOperatorLabels = "slicer.dev/gpu-operator-labels"
	// LabelDirectGPUAccess on a namespace, with value "allowed", lets its pods
	// select NVIDIA devices themselves (NVIDIA_VISIBLE_DEVICES and the like, CDI
	// device annotations), which Slicer's device-access policy refuses everywhere
	// else: for GPU system software (NVIDIA's GPU operator, monitoring) on nodes
	// Slicer does not manage. Only who may label namespaces can set it.
	LabelDirectGPUAccess = "slicer.dev/direct-gpu-access"
	// DomainPrefix is the prefix of every Slicer label and annotation; users
	// may not set such keys on their pods, except UserPodAnnotations.
	DomainPrefix = "slicer.dev/"
)

// UserPodAnnotations are the keys under DomainPrefix a user may set on a pod that asks for
// MIG slices: settings of the user's, not Slicer's allocation data.
var UserPodAnnotations = []string{AnnotationMovable}

// ReservedPodKey reports whether a pod's label (annotation false) or annotation (true) key is
// Slicer's own and may not be set by a user.
func ReservedPodKey(key string, annotation bool) bool {
	if !strings.HasPrefix(key, DomainPrefix) {
		return false
	}
	return !annotation || !slices.Contains(UserPodAnnotations, key)
}
