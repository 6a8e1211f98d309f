package mig

import "time"

// The rules of Evict mode that read no API object (docs/design/defragmentation.md, Policy):
// which running pods defragmentation may move, as far as the pod alone decides it, and the
// cluster-wide eviction cap. The scheduler plugin and slicer-sim both apply them.

// Immovable is why defragmentation may not move a running pod, by the rules that read the pod
// alone; Movable when none applies. The scheduler then also asks its PodDisruptionBudgets and
// spec.defragmentation.namespaceSelector.
type Immovable uint8

const (
	// Movable: none of the pod's own rules forbids the move.
	Movable Immovable = iota
	// ImmovableBare: no controller owns the pod, so nothing recreates it.
	ImmovableBare
	// ImmovableSameNode: its controller recreates it on the same node (a DaemonSet, or the
	// kubelet for a mirror pod, whose owner is the Node).
	ImmovableSameNode
	// ImmovableAnnotated: the pod is annotated slicer.dev/movable: "false".
	ImmovableAnnotated
	// ImmovableDeleting: the pod is being deleted.
	ImmovableDeleting
	// ImmovableSlices: the pod holds more than one slice (a plan moves single slices).
	ImmovableSlices
)

// PodMove is what the rules read of a running pod.
type PodMove struct {
	// ControllerKind is the kind of the pod's controlling owner, "" when none.
	ControllerKind string
	// AnnotatedUnmovable: the pod is annotated slicer.dev/movable: "false".
	AnnotatedUnmovable bool
	// Deleting: the pod has a deletion timestamp.
	Deleting bool
	// Slices is how many MIG slices the pod holds.
	Slices int
}

// Check applies the rules in order and says which forbids the move first.
func (p PodMove) Check() Immovable {
	switch {
	case p.ControllerKind == "":
		return ImmovableBare
	case p.ControllerKind == "DaemonSet" || p.ControllerKind == "Node":
		return ImmovableSameNode
	case p.AnnotatedUnmovable:
		return ImmovableAnnotated
	case p.Deleting:
		return ImmovableDeleting
	case p.Slices != 1:
		return ImmovableSlices
	}
	return Movable
}

// EvictionCap is spec.defragmentation's cap on Evict mode: at most Max evictions within any
// Window, cluster-wide. A plan that would pass it waits (the scheduler) or is refused (the
// simulator's loss model).
type EvictionCap struct {
	Max    int
	Window time.Duration
}

// Admit drops from past (the times of the evictions made) those a Window or more before now and
// reports whether n more evictions now stay within Max. It returns the times kept, in past's
// backing array; the caller appends the evictions it makes.
func (c EvictionCap) Admit(past []time.Time, now time.Time, n int) ([]time.Time, bool) {
	kept := past[:0]
	for _, t := range past {
		if now.Sub(t) < c.Window {
			kept = append(kept, t)
		}
	}
	return kept, len(kept)+n <= c.Max
}
