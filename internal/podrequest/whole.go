package podrequest

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// WholeGPUResource is the resource a pod asks for whole GPUs with, as users write it for
// NVIDIA's device plugin; Slicer serves the same name (docs/design/pod-requests.md, "Whole
// GPUs").
const WholeGPUResource corev1.ResourceName = migapi.NVIDIAGPUResource

// MaxRequestGPUs is the most whole GPUs one pod can hold: a pod's GPUs are on one node, and a
// node has at most 16 (NodeAccelerator status indexes its GPUs 0..15,
// api/v1alpha1/nodeaccelerator_types.go).
const MaxRequestGPUs = 16

// WholeGPUs returns how many whole GPUs (WholeGPUResource) the pod holds at once, counted by
// the device manager's rules as ForPod counts slices (an init container's GPUs are reused by
// the containers after it, a sidecar keeps its own). It returns 0 and no error for a pod that
// does not name the resource, and an error a user can act on when a container's value is not a
// whole number from 1 to MaxRequestGPUs, the pod needs more than MaxRequestGPUs at once, a
// container asks for whole GPUs and MIG slices (slicer.dev/mig-* or nvidia.com/mig-*), or one
// container asks for whole GPUs and another for slices (not supported yet).
func WholeGPUs(spec *corev1.PodSpec) (int, error) {
	need, err := WholeGPUNeed(spec)
	return need.Count(string(WholeGPUResource)), err
}

// WholeGPUNeed is WholeGPUs as a Need, the form ForPod gives a pod's slices: one item, of kind
// WholeGPUResource, and each container's share in the kubelet's allocation order (what the
// agent's preferred allocation reads). A pod that names no whole GPU gets a zero Need.
func WholeGPUNeed(spec *corev1.PodSpec) (Need, error) {
	held, containers, err := distinctDevices(spec, containerGPUs)
	if err != nil {
		return Need{}, err
	}
	n := held[string(WholeGPUResource)]
	if n > MaxRequestGPUs {
		return Need{}, fmt.Errorf("the pod needs %d whole GPUs at once; %s", n, tooManyGPUs())
	}
	if n == 0 {
		return Need{}, nil
	}
	gpus, slices := firstContainer(spec, isWholeGPU), firstContainer(spec, isSlice)
	if slices != nil {
		return Need{}, fmt.Errorf("the pod asks for whole GPUs (%s in container %q) and MIG slices (%s in container %q); "+
			"one pod holding both is not supported yet: run the slices and the whole GPUs in separate pods",
			WholeGPUResource, gpus.Name, firstResource(slices, isSlice), slices.Name)
	}
	return Need{Items: []mig.RequestItem{{Profile: string(WholeGPUResource), Count: n}}, Containers: containers}, nil
}

// MentionsWholeGPUs reports whether any container or init container names WholeGPUResource,
// valid or not: the cheap test before WholeGPUs.
func MentionsWholeGPUs(spec *corev1.PodSpec) bool { return mentionsResource(spec, isWholeGPU) }

// tooManyGPUs says why a pod holds at most MaxRequestGPUs.
func tooManyGPUs() string {
	return fmt.Sprintf("at most %d whole GPUs fit one pod (a pod's GPUs are on one node, and no node has more)", MaxRequestGPUs)
}

// containerGPUs returns a container's whole GPUs, keyed by WholeGPUResource: its limit, or its
// request when it has no limit.
func containerGPUs(c *corev1.Container) (map[string]int, error) {
	q, ok := c.Resources.Limits[WholeGPUResource]
	if !ok {
		if q, ok = c.Resources.Requests[WholeGPUResource]; !ok {
			return nil, nil
		}
	}
	if slice := firstResource(c, isSlice); slice != "" {
		return nil, fmt.Errorf("container %q asks for both %s and a MIG slice (%s); a container gets either whole GPUs or MIG slices: "+
			"ask for one of them, and run the other in a separate pod", c.Name, WholeGPUResource, slice)
	}
	n, err := count(c.Name, WholeGPUResource, q, MaxRequestGPUs, "whole GPUs", tooManyGPUs())
	if err != nil {
		return nil, err
	}
	return map[string]int{string(WholeGPUResource): n}, nil
}

func isWholeGPU(res corev1.ResourceName) bool { return res == WholeGPUResource }

// isSlice matches a MIG resource in either spelling (slicer.dev/mig-*, nvidia.com/mig-*).
func isSlice(res corev1.ResourceName) bool {
	return strings.HasPrefix(string(res), mig.ResourcePrefix) || strings.HasPrefix(string(res), mig.NVIDIAResourcePrefix)
}

// firstContainer is the first init container or container (in the kubelet's order) that
// names a resource match accepts, or nil.
func firstContainer(spec *corev1.PodSpec, match func(corev1.ResourceName) bool) *corev1.Container {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if firstResource(&cs[i], match) != "" {
				return &cs[i]
			}
		}
	}
	return nil
}
