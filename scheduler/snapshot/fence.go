package snapshot

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// A node whose NVIDIA driver the operator upgrades carries slicer.dev/driver-upgrade (its
// step; docs/driver-upgrade.md): no new slice is placed there until the label goes, whatever
// its NodeAccelerator says. Nothing else of the node changes: other pods still schedule there.

// SetNodeFence records a node's driver upgrade step ("" when none). Fencing a node makes its
// snapshot say why it takes no slice; lifting the fence counts as room freed.
func (c *Cache) SetNodeFence(name, step string) {
	c.mu.Lock()
	old := c.fences[name]
	if step == "" {
		delete(c.fences, name)
	} else {
		if c.fences == nil {
			c.fences = map[string]string{}
		}
		c.fences[name] = step
	}
	if old != step {
		c.rebuild(name)
	}
	c.mu.Unlock()
	if old != "" && step == "" {
		c.freed()
	}
}

// fenceReason is why a fenced node takes no slice ("" when it is not). Called with the lock held.
func (c *Cache) fenceReason(name string) string {
	step := c.fences[name]
	if step == "" {
		return ""
	}
	return fmt.Sprintf("the node's NVIDIA driver is being upgraded (%s=%s): it takes MIG pods again once the upgrade is done", slicerv1alpha1.LabelDriverUpgrade, step)
}

// nodeMetadata is the type of the fence informer: node metadata only.
func nodeMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("Node"))
	m.APIVersion, m.Kind = "v1", "Node"
	return m
}

// fenceCacheOptions selects, for the fence informer, only the nodes that carry the label: a
// node whose label goes leaves the selection, which the informer delivers as a delete.
func fenceCacheOptions() map[client.Object]crcache.ByObject {
	req, err := labels.NewRequirement(slicerv1alpha1.LabelDriverUpgrade, selection.Exists, nil)
	if err != nil {
		panic("snapshot: " + err.Error()) // a constant label key
	}
	return map[client.Object]crcache.ByObject{nodeMetadata(): {Label: labels.NewSelector().Add(*req)}}
}

// feedFences wires the fence informer into the cache.
func feedFences(inf crcache.Informer, c *Cache) error {
	set := func(obj any) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			c.SetNodeFence(m.Name, m.Labels[slicerv1alpha1.LabelDriverUpgrade])
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				c.SetNodeFence(m.Name, "")
			}
		},
	})
	if err != nil {
		return fmt.Errorf("node fence handler: %w", err)
	}
	return nil
}
