package plugin

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// PodRequest returns the MIG slices a pod needs (podrequest.ForPod: the distinct slices the
// kubelet hands its containers, init containers' slices reused by later containers). It
// returns nil, nil for a pod that asks for no slice.
func PodRequest(pod *corev1.Pod) ([]mig.RequestItem, error) {
	need, err := podrequest.ForPod(&pod.Spec)
	if err != nil {
		return nil, err
	}
	return need.Items, nil
}

// hasMIGRequest is the cheap check queueing hints use.
func hasMIGRequest(pod *corev1.Pod) bool { return podrequest.Mentions(&pod.Spec) }

// asksForGPUs is hasMIGRequest or a whole-GPU request (podrequest.MentionsWholeGPUs): a pod
// that may hold Slicer's GPUs or slices.
func asksForGPUs(pod *corev1.Pod) bool {
	return hasMIGRequest(pod) || podrequest.MentionsWholeGPUs(&pod.Spec)
}

// describe is "1 × 3g.40gb, 2 × 1g.10gb" in Kubernetes spelling.
func describe(slices []string) string { return podrequest.DescribeSlices(slices) }
