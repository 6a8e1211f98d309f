package agent

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// world is what one reconcile observed (observe.go): everything decide and settle read.
type world struct {
	Node string
	// Conflict: another tool owns the node (migapi.NodeForeign); the agent changes no geometry.
	Conflict migapi.Foreign
	// Bypass: a RuntimeClass selects the node's NVIDIA runtime (reported, not acted on).
	Bypass migapi.Bypass
	Obs    *engine.Observation
	// Allocs are the node's allocations that exist (finalizer ensured), by key.
	Allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation
	// Usage maps a device ID to the "namespace/name" of the pod the kubelet assigned it to
	// (nil when unknown): the slot's ID (mig.Slot.DeviceID), or the MIG UUID for a pod
	// admitted by an agent that named devices so (usageByMIGUUID).
	Usage map[string]string
	// PodGone maps a live allocation whose pod does not exist or finished (podsGone) to why.
	PodGone map[types.NamespacedName]podEnd
	// Modes is the GPU mode policy applied to each GPU the agent may switch, by UUID
	// (engine.ModePolicies); empty when the agent has no policies and switches nothing.
	Modes       map[string]migapi.ModePolicy
	OrphanSince engine.OrphanClock
	Now         time.Time
	Grace       time.Duration
}

// Event reasons of an allocation whose slice vanished (a node reboot destroys every MIG
// instance; docs/design/invariants.md, I14).
const (
	// ReasonSliceRecreated: the slice was recreated at its slot, under the same device ID.
	ReasonSliceRecreated = "SliceRecreated"
	// ReasonSliceLost: the slot cannot be recreated now (something overlaps it).
	ReasonSliceLost = "SliceLost"
)

// note is an Event to record: on the allocation Key, or on the node's NodeAccelerator
// when Key is zero.
type note struct {
	Key                   types.NamespacedName
	Type, Reason, Message string
}

func notef(k types.NamespacedName, typ, reason, format string, args ...any) note {
	return note{Key: k, Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// decision is what the agent does before it touches the GPUs.
type decision struct {
	Plan Plan
	// Statuses are the allocations' statuses unless the GPU work changes them: Failed for
	// what the node can never realize, Pending while another manager owns the node.
	Statuses map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus
	// Jobs are the MIG operations to run (runJobs), in a stable order.
	Jobs []*job
	// Released allocations lose their finalizer: they hold no slice to destroy.
	Released map[types.NamespacedName]bool
	// Collect lists live allocations whose pod is gone or finished, to delete: they get no
	// slice, and once deleting, the slice they hold is destroyed and their finalizer removed.
	Collect []types.NamespacedName
	// Notes are events to record before the GPU work.
	Notes []note
	// Unobserved maps each Ready allocation on a GPU that could not be fully observed
	// (engine.GPU.Err) to its slice as its status records it: nothing is decided for it on
	// this pass, its device stays advertised (unhealthy) and its CDI spec stays.
	Unobserved map[types.NamespacedName]engine.Slice
}

// decide validates the allocations, plans, and turns the plan into jobs. It is pure.
func decide(w world) decision {
	d := decision{
		Statuses:   map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{},
		Released:   map[types.NamespacedName]bool{},
		Unobserved: map[types.NamespacedName]engine.Slice{},
	}
	var wants, whole []Want
	ready := map[types.NamespacedName]bool{}
	for _, k := range sortedKeys(w.Allocs) {
		a := w.Allocs[k]
		wt := wantFromAllocation(a)
		if _, gone := w.PodGone[k]; gone && !wt.Deleting {
			// Its PodGone or PodFinished Event comes from collect, once the delete succeeds.
			d.Collect = append(d.Collect, k)
			continue
		}
		if g := w.Obs.GPUByUUID(wt.desired().GPU); g != nil && g.Err != nil {
			// Its GPU's instances are not known on this pass (an NVML call failed): deciding
			// now would take the slice for gone. Nothing is done for it until the GPU is
			// observed again.
			unobserved(&d, a, wt, g)
			continue
		}
		if !wt.Deleting {
			g := w.Obs.GPUByUUID(a.Spec.GPUUUID)
			policy, switches := w.Modes[a.Spec.GPUUUID]
			if msg := refusedByPolicy(a, g, policy, switches); msg != "" {
				d.Statuses[k] = failed(a, slicerv1alpha1.ReasonMIGModeOff, msg)
				continue
			}
			if msg, ok := waitsForMode(a, g, policy, switches); ok {
				d.Statuses[k] = pending(a, ReasonWaitingForModeSwitch, msg)
				continue
			}
			if reason, msg := validate(w.Obs, a, switches); reason != "" {
				d.Statuses[k] = failed(a, reason, msg)
				continue
			}
		}
		if a.Spec.WholeGPU {
			whole, ready[k] = append(whole, wt), a.Status.State == slicerv1alpha1.AllocationReady
			continue
		}
		wants = append(wants, wt)
	}
	d.Plan = plan(planInput{Slices: w.Obs.Slices(), Wants: wants, Use: usageByMIGUUID(w.Obs.Slices(), w.Usage), OrphanSince: w.OrphanSince, Now: w.Now, Grace: w.Grace})
	bindWhole(&d.Plan, w.Obs, whole, ready, w.Usage)
	p := d.Plan
	for k, s := range p.Release {
		if s == nil {
			d.Released[k] = true
		}
	}
	if w.Conflict.Present() {
		for k := range p.Create {
			d.Statuses[k] = pending(w.Allocs[k], w.Conflict.Reason, w.Conflict.Message)
		}
		for k := range p.Finish {
			d.Statuses[k] = pending(w.Allocs[k], w.Conflict.Reason, w.Conflict.Message)
		}
		return d
	}
	for k, slot := range p.Create {
		if g := w.Obs.GPUByUUID(slot.GPU); g != nil && !g.Healthy {
			// No new slice on an unhealthy GPU (the scheduler places none there either): it
			// waits until the GPU recovers.
			delete(p.Create, k)
			d.Statuses[k] = pending(w.Allocs[k], slicerv1alpha1.ReasonGPUUnhealthy, g.Unusable())
			continue
		}
		// No status before the work: the first one this slice gets is Ready (or, when the work
		// fails, Creating with the reason), one write per slice. A crash in between leaves an
		// allocation with an empty status and an instance at its slot, which the next plan
		// binds or finishes.
		d.Jobs = append(d.Jobs, &job{key: k, kind: jobCreate, slot: slot})
	}
	for k, s := range p.Finish {
		if g := w.Obs.GPUByUUID(s.GPU); g != nil && !g.Healthy {
			delete(p.Finish, k)
			d.Statuses[k] = pending(w.Allocs[k], slicerv1alpha1.ReasonGPUUnhealthy, g.Unusable())
			continue
		}
		d.Jobs = append(d.Jobs, &job{key: k, kind: jobFinish, slot: s.Slot, slice: s})
	}
	for k, s := range p.Release {
		if s != nil {
			d.Jobs = append(d.Jobs, &job{key: k, kind: jobDestroy, slot: s.Slot, slice: *s})
		}
	}
	for _, o := range p.Orphans {
		if o.Destroy {
			d.Jobs = append(d.Jobs, &job{kind: jobDestroy, slot: o.Slot, slice: o.Slice})
		}
	}
	sort.SliceStable(d.Jobs, func(i, j int) bool {
		a, b := d.Jobs[i], d.Jobs[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.key != b.key {
			return a.key.String() < b.key.String()
		}
		return a.slice.Key() < b.slice.Key()
	})
	return d
}

// unobserved records what the decision says of allocation a while its GPU g could not be
// observed: a Ready one keeps its status and device (Unobserved), one not realized yet waits
// (Pending), a deleting one waits to be destroyed (Releasing); both say why.
func unobserved(d *decision, a *slicerv1alpha1.SliceAllocation, wt Want, g *engine.GPU) {
	msg := fmt.Sprintf("GPU %d (%s) could not be observed, retrying: %v", g.Index, g.UUID, g.Err)
	switch {
	case wt.Deleting:
		d.Statuses[wt.Key] = releasing(a, slicerv1alpha1.ReasonNVMLError, "not destroying yet: "+msg)
	case a.Status.State == slicerv1alpha1.AllocationReady && a.Spec.WholeGPU:
		d.Unobserved[wt.Key] = engine.Slice{Slot: mig.WholeSlot(wt.desired().GPU), GI: -1, CI: -1}
	case a.Status.State == slicerv1alpha1.AllocationReady && a.Status.MIGDeviceUUID != "":
		s := engine.Slice{Slot: wt.desired(), GI: -1, CI: -1, MIGUUID: a.Status.MIGDeviceUUID}
		if a.Status.GPUInstanceID != nil {
			s.GI = int(*a.Status.GPUInstanceID)
		}
		if a.Status.ComputeInstanceID != nil {
			s.CI = int(*a.Status.ComputeInstanceID)
		}
		d.Unobserved[wt.Key] = s
	default:
		d.Statuses[wt.Key] = pending(a, slicerv1alpha1.ReasonNVMLError, msg)
	}
}

// outcome is a reconcile's result after the GPU work, ready to be written.
type outcome struct {
	Statuses map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus
	Released map[types.NamespacedName]bool
	// Bound maps a live allocation to its complete slice (the plan's, plus those created).
	Bound map[types.NamespacedName]engine.Slice
	Notes []note
	// Retry: something waits (in use, faults, orphans in the way).
	Retry bool
	// Mutated: a job ran; the GPUs must be observed again.
	Mutated bool
	// Reclaimed counts destroyed slices by reason (pod_gone, no_allocation).
	Reclaimed map[string]int
	// Conflicts counts new double allocations refused.
	Conflicts int
	// Forget lists orphan keys destroyed (no longer tracked).
	Forget []string
	// Unobserved is the decision's: Ready allocations on GPUs not observed this pass.
	Unobserved map[types.NamespacedName]engine.Slice
}

// settle reads the jobs' results and the rest of the plan into statuses, events and
// counts. It is pure but for log lines.
func settle(w world, d decision, log logr.Logger) outcome {
	o := outcome{
		Statuses:  map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{},
		Released:  map[types.NamespacedName]bool{},
		Bound:     map[types.NamespacedName]engine.Slice{},
		Reclaimed: map[string]int{},
	}
	for k, s := range d.Statuses {
		o.Statuses[k] = s
	}
	for k := range d.Released {
		o.Released[k] = true
	}
	for k, s := range d.Plan.Bound {
		o.Bound[k] = s
	}
	o.Unobserved = d.Unobserved
	// A GPU not observed this pass is observed again soon.
	o.Retry = len(d.Unobserved) > 0
	for _, st := range d.Statuses {
		o.Retry = o.Retry || st.Reason == slicerv1alpha1.ReasonNVMLError
	}
	for _, j := range d.Jobs {
		o.Mutated = true
		k, isAlloc := j.key, j.forAllocation()
		switch {
		case j.result.Err == nil && j.kind == jobDestroy && isAlloc:
			o.Released[k] = true
			o.Reclaimed["pod_gone"]++
			o.Notes = append(o.Notes, notef(k, corev1.EventTypeNormal, "SliceDestroyed", "destroyed %s (%s)", j.slice.Slot, j.slice.MIGUUID))
		case j.result.Err == nil && j.kind == jobDestroy:
			o.Forget = append(o.Forget, j.slice.Key())
			o.Reclaimed["no_allocation"]++
			log.Info("orphan slice reclaimed", "gpu", j.slice.GPU, "profile", j.slice.Profile, "start", j.slice.Placement.Start)
			o.Notes = append(o.Notes, notef(types.NamespacedName{}, corev1.EventTypeNormal, "OrphanReclaimed",
				"destroyed %s (%s): no allocation held it for the grace period", j.slice.Slot, j.slice.MIGUUID))
		case j.result.Err == nil:
			o.Bound[k] = j.result.Slice
			log.Info("slice created", "allocation", k, "gpu", j.slot.GPU, "profile", j.slot.Profile, "start", j.slot.Placement.Start, "device", j.result.Slice.MIGUUID)
			if old := w.Allocs[k].Status.MIGDeviceUUID; old != "" && old != j.result.Slice.MIGUUID {
				// A slice it had is gone (a node reboot destroys every instance): recreated at
				// its slot, under the same device ID (writeDevices).
				o.Notes = append(o.Notes, notef(k, corev1.EventTypeNormal, ReasonSliceRecreated,
					"recreated %s (%s) at its slot, device %s: its instance %s was gone (a node reboot?)", j.slot, j.result.Slice.MIGUUID, j.slot.DeviceID(), old))
			}
		default:
			o.Retry = true
			log.Error(j.result.Err, "MIG operation failed", "allocation", k, "slot", j.slot)
			if !isAlloc {
				continue
			}
			reason, msg := slicerv1alpha1.ReasonNVMLError, j.result.Err.Error()
			if nvml.IsInUse(j.result.Err) {
				reason = slicerv1alpha1.ReasonInUse
			}
			o.Notes = append(o.Notes, notef(k, corev1.EventTypeWarning, reason, "%s", msg))
			a := w.Allocs[k]
			switch {
			case !a.DeletionTimestamp.IsZero():
				o.Statuses[k] = releasing(a, reason, msg)
			case nvml.ReturnOf(j.result.Err) == nvml.ErrorInvalidArgument:
				o.Statuses[k] = failed(a, slicerv1alpha1.ReasonInvalidPlacement, msg)
			case nvml.ReturnOf(j.result.Err) == nvml.ErrorNotSupported:
				o.Statuses[k] = failed(a, slicerv1alpha1.ReasonProfileNotSupported, msg)
			default:
				o.Statuses[k] = creating(a, reason, msg)
			}
		}
	}
	for _, k := range sortedKeys(d.Plan.ReleaseWait) {
		o.Retry = true
		o.Notes = append(o.Notes, notef(k, corev1.EventTypeWarning, slicerv1alpha1.ReasonInUse, "not destroying: %s", d.Plan.ReleaseWait[k]))
		o.Statuses[k] = releasing(w.Allocs[k], slicerv1alpha1.ReasonInUse, "not destroying: "+d.Plan.ReleaseWait[k])
	}
	for _, k := range sortedKeys(d.Plan.Blocked) {
		why := d.Plan.Blocked[k]
		o.Retry = true
		a := w.Allocs[k]
		if a.Status.State == slicerv1alpha1.AllocationReady && !a.Spec.WholeGPU {
			// Its slice is gone (a node reboot) and its slot cannot be recreated now. Its device
			// is not advertised: the kubelet refuses to start the pod's containers (admission
			// fails, or PreStartContainer refuses) rather than start them without it.
			slot := wantFromAllocation(a).desired()
			o.Notes = append(o.Notes, notef(k, corev1.EventTypeWarning, ReasonSliceLost,
				"its instance %s is gone and its slot cannot be recreated now: %s; the kubelet does not start pod %s's containers without device %s",
				a.Status.MIGDeviceUUID, why[1], a.Spec.PodName, slot.DeviceID()))
		}
		o.Statuses[k] = pending(a, why[0], why[1])
	}
	for _, k := range sortedKeys(d.Plan.Conflict) {
		msg := d.Plan.Conflict[k]
		o.Retry = true
		if w.Allocs[k].Status.State != slicerv1alpha1.AllocationFailed {
			o.Conflicts++
			o.Notes = append(o.Notes, notef(k, corev1.EventTypeWarning, "PlacementConflict", "%s", msg))
		}
		o.Statuses[k] = failed(w.Allocs[k], "PlacementConflict", msg)
	}
	return o
}

// confirm checks the destroys that reported success against obs, observed after them: a
// slice still there (NVML said ERROR_NOT_FOUND, which the realizer takes for gone, yet the
// GPU instance is listed) is not released, nor forgotten by the orphan clock; its
// allocation keeps its finalizer and the destroy is tried again.
func (o *outcome) confirm(obs *engine.Observation, jobs []*job) {
	for _, j := range jobs {
		if j.kind != jobDestroy || j.result.Err != nil || !stillThere(obs, j.slice) {
			continue
		}
		o.Retry = true
		reason := "SliceDestroyed"
		if j.forAllocation() {
			if o.Released[j.key] {
				delete(o.Released, j.key)
				o.Reclaimed["pod_gone"]--
			}
		} else {
			reason = "OrphanReclaimed"
			if i := slices.Index(o.Forget, j.slice.Key()); i >= 0 {
				o.Forget = slices.Delete(o.Forget, i, i+1)
				o.Reclaimed["no_allocation"]--
			}
		}
		o.Notes = slices.DeleteFunc(o.Notes, func(n note) bool {
			return n.Key == j.key && n.Reason == reason && strings.Contains(n.Message, j.slice.String())
		})
	}
}

// stillThere reports whether obs has the GPU instance of s (same GPU, slot and id), or may
// have it: a GPU whose instances could not be listed confirms nothing.
func stillThere(obs *engine.Observation, s engine.Slice) bool {
	g := obs.GPUByUUID(s.GPU)
	if g == nil {
		return false
	}
	if g.Err != nil {
		return true
	}
	for _, o := range g.Slices {
		if o.Slot == s.Slot && o.GI == s.GI {
			return true
		}
	}
	return false
}

// view is what the NodeAccelerator shows of the slices: allocated ones with their holder,
// and those waiting to be destroyed.
func (o outcome) view(w world, obs *engine.Observation, release map[types.NamespacedName]*engine.Slice) engine.NodeView {
	v := engine.NodeView{Conflict: w.Conflict, Bypass: w.Bypass, Obs: obs, States: map[string]slicerv1alpha1.SliceState{}, Holders: map[string]types.NamespacedName{}}
	for k, s := range o.Bound {
		v.States[s.Key()], v.Holders[s.Key()] = slicerv1alpha1.SliceAllocated, k
	}
	for k, s := range release {
		if s != nil && !o.Released[k] {
			v.States[s.Key()], v.Holders[s.Key()] = slicerv1alpha1.SlicePendingDelete, k
		}
	}
	return v
}

func sortedKeys[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}
