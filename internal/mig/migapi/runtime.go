package migapi

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// Bypass is how a node's container runtime could hand a pod GPUs past Slicer (the
// RuntimeBypass condition). The zero value: none Slicer can tell from the API.
type Bypass struct {
	// Reason is the condition reason (slicerv1alpha1.ReasonNVIDIARuntimeClass), "" for none.
	Reason string
	// Message says what was found and how to close it; for no bypass, what was checked.
	Message string
	// Unknown: what the API shows could not be read (Message says why).
	Unknown bool
}

// Present reports whether a bypass was found.
func (b Bypass) Present() bool { return b.Reason != "" }

// RuntimeBypass says, from the Node and the cluster's RuntimeClasses alone, whether a pod on
// the node can get GPUs without Slicer, so that both frontends report it the same way. The
// NVIDIA container runtime gives a container the GPUs its NVIDIA_VISIBLE_DEVICES environment
// names, whatever its resources say; the pod policy refuses a pod that sets the variable, but
// not one whose image or envFrom sets it (admission cannot see those). So a RuntimeClass
// whose handler is an NVIDIA runtime the node's container runtime offers
// (status.runtimeHandlers, a handler named nvidia or nvidia-*) is a way past Slicer for every
// pod that names it. What the API does not show is not judged: whether the node's default
// runtime is NVIDIA's, and how that runtime is configured (docs/install.md says both).
func RuntimeBypass(node *corev1.Node, classes []nodev1.RuntimeClass) Bypass {
	if node == nil {
		return Bypass{}
	}
	offered := map[string]bool{}
	var handlers []string
	for _, h := range node.Status.RuntimeHandlers {
		if nvidiaHandler(h.Name) {
			offered[h.Name] = true
			handlers = append(handlers, h.Name)
		}
	}
	sort.Strings(handlers)
	if len(handlers) == 0 {
		return Bypass{Message: "the node's container runtime offers no NVIDIA runtime handler"}
	}
	var selecting []string
	for _, c := range classes {
		if c.DeletionTimestamp == nil && offered[c.Handler] {
			selecting = append(selecting, fmt.Sprintf("%s (handler %s)", c.Name, c.Handler))
		}
	}
	sort.Strings(selecting)
	if len(selecting) == 0 {
		return Bypass{Message: fmt.Sprintf("the node's container runtime offers the NVIDIA runtime handler %s, and no RuntimeClass selects it",
			strings.Join(handlers, ", "))}
	}
	shown := capNamed(selecting)
	return Bypass{
		Reason: slicerv1alpha1.ReasonNVIDIARuntimeClass,
		Message: fmt.Sprintf("RuntimeClass %s selects the NVIDIA container runtime of this node: a pod that names it gets the GPUs its NVIDIA_VISIBLE_DEVICES "+
			"environment asks for (also from its image or envFrom, which admission cannot see), past Slicer's slices. Delete the RuntimeClass, or keep "+
			"the runtime from reading the variable (accept-nvidia-visible-devices-envvar-when-unprivileged = false in "+
			"/etc/nvidia-container-runtime/config.toml); see docs/install.md", strings.Join(shown, ", ")),
	}
}

// nvidiaHandler reports whether a runtime handler name is NVIDIA's container runtime, as the
// NVIDIA container toolkit names the handlers it configures (nvidia, nvidia-cdi,
// nvidia-legacy, ...).
func nvidiaHandler(name string) bool {
	n := strings.ToLower(name)
	return n == "nvidia" || strings.HasPrefix(n, "nvidia-")
}
