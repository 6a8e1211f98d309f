package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// CacheOptions restricts the manager's cache to the node's own objects: its
// SliceAllocations (by label), its NodeAccelerator and its Node (by name), and
// the pods bound to it (read by the Chooser).
func CacheOptions(node string) cache.Options {
	byName := fields.OneTermEqualSelector("metadata.name", node)
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                     {Field: fields.OneTermEqualSelector("spec.nodeName", node)},
		&slicerv1alpha1.SliceAllocation{}: {Label: labels.SelectorFromSet(labels.Set{slicerv1alpha1.LabelNode: node})},
		&slicerv1alpha1.NodeAccelerator{}: {Field: byName},
		&corev1.Node{}:                    {Field: byName},
	}}
}
