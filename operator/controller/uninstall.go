package controller

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// maxNamedPods caps the pods the SlicesReleased condition names; the rest are counted.
const maxNamedPods = 10

// sliceHolder is a pod that holds MIG slices: one the live (not deleting) SliceAllocations
// name (device-plugin frontend), or one the ResourceClaims allocated by Slicer's DRA driver
// are reserved for (DRA frontend).
type sliceHolder struct {
	Pod types.NamespacedName
	UID types.UID
	// Slices is how many live allocations name this pod, or devices of its claims.
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
	// ReleasingClaims counts the ResourceClaims of Slicer's DRA driver that are being
	// deleted: their pods are gone and the kubelet unprepares them (the DRA frontend destroys
	// their instances then), before the claim controller lets them go.
	ReleasingClaims int
	// AllocatorsGone: nothing hands out new slices any more: the scheduler's Deployment and
	// pods are gone (or never ran; device-plugin frontend), and so are Slicer's DeviceClasses
	// (DRA frontend: the stock scheduler allocates only through them).
	AllocatorsGone bool
}

// releaseDecision is what the step does. It is pure: decideRelease.
type releaseDecision struct {
	// Done: no allocation is left; the agents, the driver and the rest may go.
	Done bool
	// StopAllocators: delete the scheduler and the DeviceClasses first (Force), so no pod
	// gets a new slice.
	StopAllocators bool
	// DeletePods are the holder pods to delete (Force, once the scheduler is gone).
	DeletePods []sliceHolder
	// Reason and Message of the SlicesReleased condition (False unless Done).
	Reason, Message string
}

// decideRelease is the release step's decision: under Wait nothing is removed while a pod
// holds a slice; under Force the scheduler and the DeviceClasses go first, then the holder
// pods, and the step is done once the agents have released every allocation and the kubelets
// every claim.
func decideRelease(f releaseFacts) releaseDecision {
	if len(f.Holders) == 0 && f.Releasing == 0 && f.ReleasingClaims == 0 {
		return releaseDecision{Done: true, Reason: slicerv1alpha1.ReasonAsExpected, Message: "no pod holds a MIG slice; the agents released every allocation"}
	}
	pods := namePods(f.Holders)
	if f.Policy != slicerv1alpha1.UninstallForce {
		if len(f.Holders) == 0 {
			return releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods,
				Message: fmt.Sprintf("waiting for the agents to release %d allocations whose pods are gone", f.Releasing) + claimsNote(f)}
		}
		return releaseDecision{Reason: slicerv1alpha1.ReasonWaitingForPods, Message: fmt.Sprintf(
			"%d pods hold MIG slices: %s; Slicer keeps running until they are deleted, or set spec.uninstall.policy to Force to delete them",
			len(f.Holders), pods)}
	}
	d := releaseDecision{Reason: slicerv1alpha1.ReasonReleasingSlices}
	switch {
	case !f.AllocatorsGone:
		d.StopAllocators = true
		d.Message = fmt.Sprintf("stopping the scheduler and removing the DeviceClasses, then deleting the %d pods that hold MIG slices: %s", len(f.Holders), pods)
	case len(f.Holders) > 0:
		for _, h := range f.Holders {
			if h.Exists && !h.Deleting {
				d.DeletePods = append(d.DeletePods, h)
			}
		}
		d.Message = fmt.Sprintf("deleting the %d pods that hold MIG slices: %s; %d allocations being released", len(f.Holders), pods, f.Releasing) + claimsNote(f)
	default:
		d.Message = fmt.Sprintf("waiting for the agents to destroy the MIG instances of %d allocations and release them", f.Releasing) + claimsNote(f)
	}
	return d
}

// claimsNote adds the DRA claims being released to a message, when there are any.
func claimsNote(f releaseFacts) string {
	if f.ReleasingClaims == 0 {
		return ""
	}
	return fmt.Sprintf("; %d ResourceClaims of %s being released (the kubelets unprepare them)", f.ReleasingClaims, migdra.DriverName)
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

// claimHolders groups the pods that the live ResourceClaims allocated by driver are reserved
// for, sorted; a pod holds as many slices as those claims have devices of the driver. The DRA
// frontend creates a claim's instances when the kubelet prepares it for a pod and destroys
// them when the kubelet unprepares it, as the pod ends: a claim reserved for no pod holds no
// instance. Claims being deleted are counted apart (releasing).
func claimHolders(claims []resourceapi.ResourceClaim, driver string) (holders []sliceHolder, releasing int) {
	byPod := map[sliceHolder]int{}
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		devices := 0
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == driver {
				devices++
			}
		}
		if devices == 0 {
			continue
		}
		if c.DeletionTimestamp != nil {
			releasing++
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if ref.APIGroup != "" || ref.Resource != "pods" {
				continue
			}
			byPod[sliceHolder{Pod: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}, UID: ref.UID}] += devices
		}
	}
	return sortedHolders(byPod), releasing
}

// mergeHolders joins the holders of both frontends: a pod named by both is one holder.
func mergeHolders(lists ...[]sliceHolder) []sliceHolder {
	byPod := map[sliceHolder]int{}
	for _, l := range lists {
		for _, h := range l {
			n := h.Slices
			h.Slices = 0
			byPod[h] += n
		}
	}
	return sortedHolders(byPod)
}

// sortedHolders turns holder keys (Slices zero) with their slice counts into a list sorted
// by namespace/name, then UID.
func sortedHolders(byPod map[sliceHolder]int) []sliceHolder {
	if len(byPod) == 0 {
		return nil
	}
	holders := make([]sliceHolder, 0, len(byPod))
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
	return holders
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
	return sortedHolders(byPod), releasing
}
