package plugin

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// AllocationName is the deterministic name of a pod's index-th slice:
// <pod-name, truncated>-<first 8 chars of the pod UID>-<index>, at most 253
// characters and a DNS-1123 subdomain (pod names already are one).
func AllocationName(podName string, uid string, index int32) string {
	short := uid
	if len(short) > 8 {
		short = short[:8]
	}
	suffix := "-" + strings.ToLower(short) + "-" + strconv.Itoa(int(index))
	if max := 253 - len(suffix); len(podName) > max {
		podName = podName[:max]
	}
	podName = strings.TrimRight(podName, "-.")
	return podName + suffix
}

// allocationFor is the SliceAllocation the scheduler commits for one slot.
func allocationFor(pod *corev1.Pod, node string, s snapshot.Slot) *slicerv1alpha1.SliceAllocation {
	return &slicerv1alpha1.SliceAllocation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      AllocationName(pod.Name, string(pod.UID), s.Index),
			Labels: map[string]string{
				slicerv1alpha1.LabelNode:   node,
				slicerv1alpha1.LabelPodUID: string(pod.UID),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: slicerv1alpha1.SliceAllocationSpec{
			PodName:   pod.Name,
			PodUID:    string(pod.UID),
			NodeName:  node,
			GPUUUID:   s.GPU,
			Profile:   migapi.APIProfile(s.Profile),
			Placement: migapi.APIPlacement(s.Placement),
			Index:     s.Index,
		},
	}
}
