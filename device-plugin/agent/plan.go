package agent

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// Slot is a (GPU, profile, placement) triple: where a slice is or should be.
// It is the type the scheduler's snapshot uses too; the profile is internal/mig's name.
type Slot = mig.Slot

// Want is what one SliceAllocation asks of the node.
type Want struct {
	Key types.NamespacedName
	// Pod is "namespace/name" of the holder pod (how the kubelet names it).
	Pod string
	// Spec is the scheduler's slot; Actual, when set, is where the pod's device
	// really is (learned from the kubelet).
	Spec   Slot
	Actual *Slot
	// Device is status.migDeviceUUID.
	Device   string
	Deleting bool
}

func (w Want) desired() Slot {
	if w.Actual != nil {
		return *w.Actual
	}
	return w.Spec
}

// Plan is what the node must do, computed from observation only.
type Plan struct {
	// Bound maps a live allocation to the complete slice it holds.
	Bound map[types.NamespacedName]engine.Slice
	// Create lists the slots to create (GI + CI) for allocations.
	Create map[types.NamespacedName]Slot
	// Finish lists GPU instances without a compute instance an allocation wants.
	Finish map[types.NamespacedName]engine.Slice
	// Blocked explains why a live allocation waits (reason, message).
	Blocked map[types.NamespacedName][2]string
	// Conflict lists live allocations whose slot overlaps a slice another
	// allocation holds (a double allocation the agent refuses).
	Conflict map[types.NamespacedName]string
	// Release lists deleting allocations with the slice to destroy (nil: nothing
	// to destroy, the finalizer can go).
	Release map[types.NamespacedName]*engine.Slice
	// ReleaseWait lists deleting allocations whose slice is in use.
	ReleaseWait map[types.NamespacedName]string
	// Orphans are slices no allocation holds, with their state.
	Orphans []Orphan
	// InUse holds the MIG UUIDs the kubelet reports assigned to a pod.
	InUse map[string]string
}

// Orphan is a slice that no allocation holds.
type Orphan struct {
	engine.Slice
	// Destroy is true once the grace period passed and the slice is unused.
	Destroy bool
	// User is the pod UID using it, if any (never destroyed then).
	User string
}

// planInput is everything a plan is computed from.
type planInput struct {
	Slices []engine.Slice
	Wants  []Want
	// Use maps a MIG UUID to the "namespace/name" of the pod the kubelet assigned it to
	// (nil when unknown).
	Use map[string]string
	// OrphanSince is when each slice (engine.Slice.Key) was first seen unclaimed, as of the
	// reconciles before this one.
	OrphanSince engine.OrphanClock
	Now         time.Time
	Grace       time.Duration
}

// plan computes the node's actions. It is pure: same input, same plan.
func plan(in planInput) Plan {
	p := Plan{
		Bound: map[types.NamespacedName]engine.Slice{}, Create: map[types.NamespacedName]Slot{},
		Finish: map[types.NamespacedName]engine.Slice{}, Blocked: map[types.NamespacedName][2]string{},
		Conflict: map[types.NamespacedName]string{}, Release: map[types.NamespacedName]*engine.Slice{},
		ReleaseWait: map[types.NamespacedName]string{}, InUse: in.Use,
	}
	wants := append([]Want(nil), in.Wants...)
	sort.Slice(wants, func(i, j int) bool { return wants[i].Key.String() < wants[j].Key.String() })
	claimed := make([]bool, len(in.Slices))
	holder := make([]*Want, len(in.Slices))
	done := map[types.NamespacedName]bool{}

	// 1. The kubelet's truth first: a slice assigned to a pod belongs to that
	// pod's allocation of the same profile (preferring the one that wants it).
	for i, s := range in.Slices {
		uid, used := in.Use[s.MIGUUID]
		if !used || s.MIGUUID == "" {
			continue
		}
		best := -1
		for j := range wants {
			w := &wants[j]
			if w.Deleting || done[w.Key] || w.Pod != uid || w.Spec.Profile != s.Profile {
				continue
			}
			if best < 0 || w.desired() == s.Slot || w.Device == s.MIGUUID {
				best = j
			}
		}
		if best >= 0 {
			claimed[i], holder[i], done[wants[best].Key] = true, &wants[best], true
			p.Bound[wants[best].Key] = s
		}
	}
	// 2. Live allocations take the slice at their slot, or the swap partner's.
	for j := range wants {
		w := &wants[j]
		if w.Deleting || done[w.Key] {
			continue
		}
		want := w.desired()
		idx := -1
		if st, i := engine.AtSlot(in.Slices, want); st == engine.SlotReuse || st == engine.SlotFinish {
			idx = i
		}
		if idx >= 0 && claimed[idx] && holder[idx] != nil && holder[idx].desired() != in.Slices[idx].Slot {
			// The kubelet gave our slice to another pod of the same profile:
			// take the slice that pod's allocation was realized for.
			other := holder[idx].desired()
			idx = -1
			for i, s := range in.Slices {
				if s.Slot == other && !claimed[i] && s.Complete() {
					idx = i
				}
			}
			if idx < 0 {
				p.Blocked[w.Key] = [2]string{ReasonSwapped, "the kubelet gave this allocation's slice to another pod; waiting for that pod's slice"}
				continue
			}
		}
		if idx >= 0 && in.Slices[idx].Unhealthy != "" && (w.Device == "" || w.Device != in.Slices[idx].MIGUUID) && !claimed[idx] {
			// An unhealthy instance is never handed to an allocation that did not hold it: it
			// is destroyed (step 4) and this allocation gets a new one.
			p.Blocked[w.Key] = [2]string{slicerv1alpha1.ReasonGPUUnhealthy, fmt.Sprintf("the instance at %s is unhealthy (%s); it is destroyed and created again", want, in.Slices[idx].Unhealthy)}
			continue
		}
		if idx >= 0 {
			if claimed[idx] {
				p.Conflict[w.Key] = fmt.Sprintf("slot %s is already held by %s", want, holder[idx].Key)
				continue
			}
			claimed[idx], holder[idx], done[w.Key] = true, w, true
			if in.Slices[idx].Complete() {
				p.Bound[w.Key] = in.Slices[idx]
			} else {
				p.Finish[w.Key] = in.Slices[idx]
			}
			continue
		}
		p.Create[w.Key] = want
		done[w.Key] = true
	}
	// Creates must not overlap an existing slice or another create.
	createKeys := make([]types.NamespacedName, 0, len(p.Create))
	for k := range p.Create {
		createKeys = append(createKeys, k)
	}
	sort.Slice(createKeys, func(i, j int) bool { return createKeys[i].String() < createKeys[j].String() })
	var planned []Slot
	for _, k := range createKeys {
		slot := p.Create[k]
		if st, i := engine.AtSlot(in.Slices, slot); st != engine.SlotCreate { // a slice overlaps it
			s := in.Slices[i]
			delete(p.Create, k)
			if claimed[i] && holder[i] != nil {
				p.Conflict[k] = fmt.Sprintf("slot %s overlaps %s held by %s", slot, s.Slot, holder[i].Key)
			} else {
				p.Blocked[k] = [2]string{"WaitingForOrphan", fmt.Sprintf("slot %s overlaps %s, a slice no allocation holds; it is destroyed after the orphan grace period if unused", slot, s.Slot)}
			}
			continue
		}
		for _, o := range planned {
			if o.Overlaps(slot) {
				delete(p.Create, k)
				p.Conflict[k] = fmt.Sprintf("slot %s overlaps slot %s of another allocation", slot, o)
				break
			}
		}
		if _, ok := p.Create[k]; ok {
			planned = append(planned, slot)
		}
	}
	// 3. Deleting allocations release the slice they really held, unless a
	// live allocation holds it now or a pod uses it. A finished pod's slice is not held
	// here for long: the kubelet's PodResources List first drops the devices of every pod
	// that is not active (terminal or terminated) and then lists active pods only, or, with
	// the deprecated gate KubeletPodResourcesListUseActivePods off, every pod with what is
	// left (k8s.io/kubernetes pkg/kubelet/apis/podresources/server_v1.go, List;
	// pkg/kubelet/cm/devicemanager/manager.go, UpdateAllocatedDevices). Only while the
	// kubelet's sources are not ready yet, just after it starts, may it still report one.
	for j := range wants {
		w := &wants[j]
		if !w.Deleting {
			continue
		}
		idx := -1
		for i, s := range in.Slices {
			if w.Device != "" && s.MIGUUID == w.Device {
				idx = i
			}
		}
		if idx < 0 {
			// The device is gone (or never recorded): a leftover at the slot,
			// e.g. a GPU instance whose compute instance was already destroyed.
			for i, s := range in.Slices {
				if s.Slot == w.desired() {
					idx = i
				}
			}
		}
		if idx < 0 || claimed[idx] {
			p.Release[w.Key] = nil
			continue
		}
		s := in.Slices[idx]
		claimed[idx], holder[idx] = true, w
		if uid, used := in.Use[s.MIGUUID]; used && s.MIGUUID != "" {
			p.ReleaseWait[w.Key] = "MIG device " + s.MIGUUID + " is still assigned to pod " + uid
			continue
		}
		p.Release[w.Key] = &s
	}
	// 4. Everything else is an orphan. A slice realized for a live allocation whose pod
	// the kubelet gave another slice (that allocation is bound elsewhere) is spare: no
	// one waits for it, so an unused one goes now rather than after the grace period.
	spare := map[Slot]bool{}
	for j := range wants {
		w := &wants[j]
		if s, ok := p.Bound[w.Key]; ok && !w.Deleting && s.Slot != w.Spec {
			spare[w.Spec] = true
		}
	}
	for i, s := range in.Slices {
		if claimed[i] {
			continue
		}
		o := Orphan{Slice: s, User: in.Use[s.MIGUUID]}
		if s.MIGUUID == "" {
			o.User = ""
		}
		// An unhealthy one nobody uses goes now too: nothing will take it.
		o.Destroy = o.User == "" && (spare[s.Slot] || s.Unhealthy != "" || in.OrphanSince.Due(s.Key(), in.Now, in.Grace))
		p.Orphans = append(p.Orphans, o)
	}
	return p
}

// wantFromAllocation turns an allocation into a Want.
func wantFromAllocation(a *slicerv1alpha1.SliceAllocation) Want {
	spec := migapi.SlotAsWritten(&a.Spec)
	w := Want{
		Key: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, Pod: a.Namespace + "/" + a.Spec.PodName, Spec: spec,
		Device: a.Status.MIGDeviceUUID, Deleting: a.DeletionTimestamp != nil,
	}
	act := spec
	if g := a.Status.ActualGPUUUID; g != "" {
		act.GPU = g
	}
	if ap := a.Status.ActualPlacement; ap != nil {
		act.Placement = migapi.Placement(*ap)
	}
	if act != spec {
		w.Actual = &act
	}
	return w
}
