package controller

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// maxNamedPods caps the pods the SlicesReleased condition names; the rest are counted.
const maxNamedPods = 10

// sliceHolder is a pod that the live (not deleting) SliceAllocations name.
type sliceHolder struct {
	Pod types.NamespacedName
	UID types.UID
	// Slices is how many live allocations name this pod.
	Slices int
	// Exists: the pod with this UID exists; Deleting: it is terminating.
	Exists, Deleting bool
}

// releaseFacts is what the first teardown step observes (observeRelease).
type releaseFacts struct {
	Policy slicerv1alpha1.UninstallPolicy
	// Holders are the pods of the live allocations, sorted by namespace/name.
	Holders []sliceHolder
	// Releasing counts the allocations being deleted: their agents destroy the instances
	// and then remove the finalizer.
	Releasing int
	// SchedulerGone: the scheduler's Deployment and pods are gone (or never ran), so no
	// new allocation is made.
	SchedulerGone bool
}

// releaseDecision is what the step does. It is pure: decideRelease.
type releaseDecision struct {
	// Done: no allocation is left; the agents, the driver and the rest may go.
	Done bool
	// StopScheduler: delete the scheduler first (Force), so no pod gets a new slice.
	StopScheduler bool
	// DeletePods are the holder pods to delete (Force, once the scheduler is gone).
	DeletePods []sliceHolder
	// Reason and Message of the SlicesReleased condition (False unless Done).
	Reason, Message string
}

// decideRelease is the release step's decision: under Wait nothing is removed while a pod
// holds a slice; under Force the scheduler goes first, then the holder pods, and the step is
// done once the agents have released every allocation.
func decideRelease(f releaseFacts) releaseDecision {
	if len(f.Holders) == 0 && f.Releasing == 0 {
		return releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected, Message: "no pod holds a MIG slice; the agents released every allocation"}
	}
	pods := namePods(f.Holders)
	if f.Policy != slicerv1alpha1.UninstallForce {
		if len(f.Holders) == 0 {
			return releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods,
				Message: fmt.Sprintf("waiting for the agents to release %d allocations whose pods are gone", f.Releasing)}
		}
		return releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods, Message: fmt.Sprintf(
			"%d pods hold MIG slices: %s; Slicer keeps running until they are deleted, or set spec.uninstall.policy to Force to delete them",
			len(f.Holders), pods)}
	}
	d := releaseDecision{Reason: slicerv1alpha1.ReasonReleasingSlices}
	switch {
	case !f.SchedulerGone:
		d.StopScheduler = true
		d.Message = fmt.Sprintf("stopping the scheduler, then deleting the %d pods that hold MIG slices: %s", len(f.Holders), pods)
	case len(f.Holders) > 0:
		for _, h := range f.Holders {
			if h.Exists && !h.Deleting {
				d.DeletePods = append(d.DeletePods, h)
			}
		}
		d.Message = fmt.Sprintf("deleting the %d pods that hold MIG slices: %s; %d allocations being released", len(f.Holders), pods, f.Releasing)
	default:
		d.Message = fmt.Sprintf("waiting for the agents to destroy the MIG instances of %d allocations and release them", f.Releasing)
	}
	return d
}

// namePods lists up to maxNamedPods holders as namespace/name, then how many more.
func namePods(hs []sliceHolder) string {
	names := make([]string, 0, min(len(hs), maxNamedPods))
	for i, h := range hs {
		if i == maxNamedPods {
			break
		}
		names = append(names, h.Pod.String())
	}
	s := strings.Join(names, ", ")
	if more := len(hs) - len(names); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// holdersOf groups the live allocations by pod (namespace, name, UID), sorted; it counts
// the deleting ones apart.
func holdersOf(allocs []slicerv1alpha1.SliceAllocation) (holders []sliceHolder, releasing int) {
	byPod := map[sliceHolder]int{}
	for i := range allocs {
		a := &allocs[i]
		if a.DeletionTimestamp != nil {
			releasing++
			continue
		}
		byPod[sliceHolder{Pod: types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.PodName}, UID: types.UID(a.Spec.PodUID)}]++
	}
	for h, n := range byPod {
		h.Slices = n
		holders = append(holders, h)
	}
	sort.Slice(holders, func(i, j int) bool {
		if holders[i].Pod != holders[j].Pod {
			return holders[i].Pod.String() < holders[j].Pod.String()
		}
		return holders[i].UID < holders[j].UID
	})
	return holders, releasing
}
