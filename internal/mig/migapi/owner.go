package migapi

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
)

// NVIDIAGPUResource is the whole-GPU resource of NVIDIA's device plugin.
const NVIDIAGPUResource = "nvidia.com/gpu"

// Foreign is why another tool owns a node's MIG devices, so that Slicer's agent changes no
// MIG geometry there and serves no slice (the OwnershipConflict condition). The zero value:
// no other tool does.
type Foreign struct {
	// Reason is the condition reason (slicerv1alpha1.ReasonForeignMIGManager or
	// ReasonForeignDevicePlugin), "" when no other tool owns the node.
	Reason string
	// Message says what was found and how to give the node back to Slicer.
	Message string
}

// Present reports whether another tool owns the node.
func (f Foreign) Present() bool { return f.Reason != "" }

// maxNamed bounds how many foreign resources a message names.
const maxNamed = 4

// NodeForeign says whether another tool owns node's MIG devices, from the Node object alone,
// so that both frontends (device-plugin/agent, device-plugin/dra) decide it the same way:
//
//   - the node carries nvidia.com/mig.config, the label NVIDIA's MIG manager reconfigures
//     the GPUs from; or
//   - another device plugin advertises nvidia.com/gpu or nvidia.com/mig-* there (capacity or
//     allocatable not zero), other than the served resources, which the caller's own plugin
//     advertises. The device-plugin frontend serves slicer.dev/mig-* and whole GPUs as
//     nvidia.com/gpu (served); the DRA frontend advertises nothing. So any other such
//     resource is another plugin's, whose pods could be handed the MIG devices Slicer creates
//     for others. The kubelet keeps a resource's capacity for a while after its plugin goes,
//     so the node is refused until it drops it.
//
// The kubelet serves one plugin per resource name, so another plugin that advertises a served
// resource (NVIDIA's, for nvidia.com/gpu) cannot be told apart from the caller's own by the
// Node: keeping it off Slicer's nodes is the install's part (docs/install.md), and its
// nvidia.com/mig-* resources still mark the node.
//
// A nil node (not found) has no other owner.
func NodeForeign(node *corev1.Node, served ...string) Foreign {
	if node == nil {
		return Foreign{}
	}
	if v, ok := node.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]; ok {
		return Foreign{
			Reason: slicerv1alpha1.ReasonForeignMIGManager,
			Message: fmt.Sprintf("the node carries the %s label of NVIDIA's MIG manager (value %q); the agent changes no MIG geometry here. "+
				"To give the node to Slicer, keep NVIDIA's MIG manager off it and remove the label "+
				"(kubectl label node %s %s-); next to the GPU operator see docs/install.md",
				slicerv1alpha1.LabelNVIDIAMIGConfig, v, node.Name, slicerv1alpha1.LabelNVIDIAMIGConfig),
		}
	}
	names := foreignResources(node, served)
	if len(names) == 0 {
		return Foreign{}
	}
	shown := capNamed(names)
	return Foreign{
		Reason: slicerv1alpha1.ReasonForeignDevicePlugin,
		Message: fmt.Sprintf("another device plugin advertises %s on the node, and its pods could be given the MIG devices Slicer creates; "+
			"the agent changes no MIG geometry and serves no slice here. To give the node to Slicer, keep that plugin off it "+
			"(NVIDIA's GPU operator: node label %s=false, which Slicer sets itself in Preinstalled mode; see docs/install.md)",
			strings.Join(shown, ", "), slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin),
	}
}

// capNamed keeps the first maxNamed names and says how many more there are.
func capNamed(names []string) []string {
	if len(names) <= maxNamed {
		return names
	}
	return append(append([]string(nil), names[:maxNamed]...), fmt.Sprintf("and %d more", len(names)-maxNamed))
}

// foreignResources lists, sorted, the NVIDIA device plugin's resources, other than served, the
// node has a non-zero capacity or allocatable of.
func foreignResources(node *corev1.Node, served []string) []string {
	seen := map[string]bool{}
	for _, list := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		for name, q := range list {
			n := string(name)
			if (n == NVIDIAGPUResource || strings.HasPrefix(n, mig.NVIDIAResourcePrefix)) && !q.IsZero() && !slices.Contains(served, n) {
				seen[n] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
