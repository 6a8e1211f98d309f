package plugin

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// allocationFor is the SliceAllocation the scheduler commits for one slot.
func allocationFor(pod *corev1.Pod, node string, s snapshot.Slot) *slicerv1alpha1.SliceAllocation {
	a := &slicerv1alpha1.SliceAllocation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      slicerv1alpha1.AllocationName(pod.Name, string(pod.UID), s.Index),
			Labels: map[string]string{
				slicerv1alpha1.LabelNode:   node,
				slicerv1alpha1.LabelPodUID: string(pod.UID),
			},
			// The agent's finalizer from the start: the agent need not add it (one API
			// write less per slice), and the allocation cannot go before the agent has
			// released what it may have realized (docs/design/handoff.md).
			Finalizers: []string{slicerv1alpha1.AllocationFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: slicerv1alpha1.SliceAllocationSpec{
			PodName:  pod.Name,
			PodUID:   string(pod.UID),
			NodeName: node,
			Index:    s.Index,
		},
	}
	migapi.SpecSlot(&a.Spec, s.Slot)
	return a
}
