package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
)

// writeStatuses patches changed statuses, a few at a time. An allocation that turns Ready
// gets its realize-duration sample and no Event: the status is the record of success, and
// an Event per slice would double the writes on the pod's way to its node (failures keep
// their Warning Events).
func (r *Reconciler) writeStatuses(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, st map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus) error {
	type change struct {
		a *slicerv1alpha1.SliceAllocation
		s slicerv1alpha1.SliceAllocationStatus
	}
	var changes []change
	for k, s := range st {
		a := allocs[k]
		if a == nil || equality.Semantic.DeepEqual(a.Status, s) || r.own.stale(a) {
			continue
		}
		if s.State == slicerv1alpha1.AllocationReady && a.Status.State != slicerv1alpha1.AllocationReady {
			if first, ok := r.firstSeen[k]; ok {
				r.opts.Metrics.RealizeDuration.Observe(r.opts.Now().Sub(first).Seconds())
			}
		}
		changes = append(changes, change{a: a, s: s})
	}
	return parallel(changes, func(c change) error {
		patch := client.MergeFromWithOptions(c.a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		rv := c.a.ResourceVersion
		c.a.Status = c.s
		if err := r.client.Status().Patch(ctx, c.a, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("status of %s/%s: %w", c.a.Namespace, c.a.Name, err)
		}
		r.own.wrote(client.ObjectKeyFromObject(c.a), rv)
		return nil
	})
}

// ownWrites remembers, per allocation, the resourceVersion the agent's last write to it
// replaced. A cached copy still at that version predates the write (the watch has not
// delivered it yet): the agent writes nothing from it, since the write would only conflict
// (and cost a request), and the watch event of its own write brings the next reconcile.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]string
}

func (o *ownWrites) wrote(k types.NamespacedName, replacedRV string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.replaced == nil {
		o.replaced = map[types.NamespacedName]string{}
	}
	o.replaced[k] = replacedRV
}

func (o *ownWrites) stale(a *slicerv1alpha1.SliceAllocation) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	rv, ok := o.replaced[client.ObjectKeyFromObject(a)]
	return ok && rv == a.ResourceVersion
}

// prune forgets the writes the cache has caught up with, and those of allocations gone.
func (o *ownWrites) prune(cached map[types.NamespacedName]*slicerv1alpha1.SliceAllocation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, rv := range o.replaced {
		if a := cached[k]; a == nil || a.ResourceVersion != rv {
			delete(o.replaced, k)
		}
	}
}

// parallel runs fn on every item, 16 at a time, and joins the errors.
func parallel[T any](items []T, fn func(T) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 16)
	)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ensureFinalizers adds the agent's finalizer to the live allocations that lack it
// (allocations, observe.go) before any slice is made for them. For those the cache may still
// show an allocation that is gone (the scheduler's Unreserve, a deleted pod): adding the
// finalizer is the check, and one that is gone is dropped from allocs, so it gets no slice
// (which would be left to the orphan grace period). An allocation created with the finalizer
// cannot be gone while the cache shows it live: it goes only once this agent, having seen its
// deletion, removes the finalizer.
func (r *Reconciler) ensureFinalizers(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, need []*slicerv1alpha1.SliceAllocation) error {
	var goneMu sync.Mutex
	return parallel(need, func(a *slicerv1alpha1.SliceAllocation) error {
		gone, err := r.ensureFinalizer(ctx, a)
		if gone {
			goneMu.Lock()
			delete(allocs, client.ObjectKeyFromObject(a))
			goneMu.Unlock()
		}
		return err
	})
}

// ensureFinalizer adds the agent's finalizer; gone reports an allocation that
// no longer exists.
func (r *Reconciler) ensureFinalizer(ctx context.Context, a *slicerv1alpha1.SliceAllocation) (gone bool, err error) {
	if controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	rv := a.ResourceVersion
	controllerutil.AddFinalizer(a, slicerv1alpha1.AllocationFinalizer)
	if err := r.client.Patch(ctx, a, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("add finalizer to %s/%s: %w", a.Namespace, a.Name, err)
	}
	r.own.wrote(client.ObjectKeyFromObject(a), rv)
	return false, nil
}

// collect deletes allocations whose pod is gone or finished (decision.Collect); the agent's finalizer
// keeps each until its slice is destroyed. The delete is conditional on the allocation's
// UID, so an allocation recreated under the same name is not touched, and on the version the
// decision read: a reconcile on a cache that has not yet seen the deletion it made before
// gets a conflict and neither counts, logs nor records an Event for the release again (the
// change it missed brings another reconcile).
func (r *Reconciler) collect(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, keys []types.NamespacedName, ends map[types.NamespacedName]podEnd) error {
	var doomed []*slicerv1alpha1.SliceAllocation
	for _, k := range keys {
		doomed = append(doomed, allocs[k])
	}
	return parallel(doomed, func(a *slicerv1alpha1.SliceAllocation) error {
		end := ends[client.ObjectKeyFromObject(a)]
		err := r.client.Delete(ctx, a, client.Preconditions{UID: &a.UID, ResourceVersion: &a.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete %s/%s (%s): %w", a.Namespace, a.Name, end.Why, err)
		}
		if err != nil {
			return nil
		}
		r.event(a, corev1.EventTypeNormal, end.Reason(), "releasing the allocation: %s", end.Why)
		if end.Finished {
			r.opts.Metrics.PodFinished.Inc()
			r.log(ctx).Info("allocation released: its pod finished", "allocation", client.ObjectKeyFromObject(a), "pod", a.Spec.PodName, "podUID", a.Spec.PodUID)
			return nil
		}
		r.opts.Metrics.PodGone.Inc()
		r.log(ctx).Info("allocation released: its pod is gone", "allocation", client.ObjectKeyFromObject(a), "pod", a.Spec.PodName, "podUID", a.Spec.PodUID)
		return nil
	})
}

// removeFinalizers lets released allocations go.
func (r *Reconciler) removeFinalizers(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, released map[types.NamespacedName]bool) error {
	var done []*slicerv1alpha1.SliceAllocation
	for k := range released {
		done = append(done, allocs[k])
		delete(r.firstSeen, k)
	}
	return parallel(done, func(a *slicerv1alpha1.SliceAllocation) error {
		if !controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) || r.own.stale(a) {
			return nil
		}
		patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		rv := a.ResourceVersion
		controllerutil.RemoveFinalizer(a, slicerv1alpha1.AllocationFinalizer)
		if err := r.client.Patch(ctx, a, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("remove finalizer from %s/%s: %w", a.Namespace, a.Name, err)
		}
		r.own.wrote(client.ObjectKeyFromObject(a), rv)
		return nil
	})
}

func (r *Reconciler) event(obj client.Object, typ, reason, format string, args ...any) {
	engine.Emit(r.recorder, obj, typ, reason, format, args...)
}

// record emits notes: on their allocation, or on the node's NodeAccelerator.
func (r *Reconciler) record(allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, notes []note) {
	for _, n := range notes {
		var obj client.Object = &slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName}}
		if n.Key.Name != "" {
			if a := allocs[n.Key]; a != nil {
				obj = a
			} else {
				continue
			}
		}
		r.event(obj, n.Type, n.Reason, "%s", n.Message)
	}
}

// writeDevices writes the CDI spec of every complete bound slice, marks its allocation
// Ready (or Creating on a CDI error), removes stale specs and advertises the devices to the
// kubelet. A slice's device ID and CDI device name are its slot's (mig.Slot.DeviceID), not
// its MIG UUID: the spec of a slice recreated at its slot after a reboot takes the name the
// kubelet checkpointed for the pod and points at the new instance. A slice the kubelet knows
// by its MIG UUID (a pod admitted when the agent named devices so) keeps a spec under that
// name too, for its containers' restarts. A whole GPU's device ID and CDI name are its UUID
// (whole.go). It returns whether something must be retried, and
// the device ID of each allocation it marked Ready.
func (r *Reconciler) writeDevices(ctx context.Context, w world, obs *engine.Observation, o outcome) (bool, map[types.NamespacedName]string) {
	retry := false
	readyIDs := map[types.NamespacedName]string{}
	var devices []plugin.Device
	keep := map[string]bool{}
	for k, s := range o.Bound {
		if _, bad := o.Statuses[k]; bad {
			continue
		}
		var err error
		status := ready
		switch {
		case s.Whole():
			keep[s.DeviceID()] = true
			err, status = r.writeWholeCDI(obs, s), readyWhole
		case !s.Complete():
			continue
		default:
			names := []string{s.DeviceID()}
			if _, legacy := w.Usage[s.MIGUUID]; legacy {
				names = append(names, s.MIGUUID)
			}
			for _, name := range names {
				keep[name] = true
				err = errors.Join(err, r.writeCDI(obs, s, name))
			}
		}
		if err != nil {
			retry = true
			o.Statuses[k] = creating(w.Allocs[k], "CDIError", err.Error())
			continue
		}
		devices = append(devices, deviceFor(obs, s))
		o.Statuses[k] = status(w.Allocs[k], s)
		readyIDs[k] = s.DeviceID()
	}
	for _, s := range o.Unobserved {
		// Its GPU was not observed this pass: its spec stays, its device stays advertised,
		// unhealthy, until the GPU is observed again.
		keep[s.DeviceID()] = true
		if _, legacy := w.Usage[s.MIGUUID]; legacy {
			keep[s.MIGUUID] = true
		}
		d := deviceFor(obs, s)
		d.Healthy = false
		devices = append(devices, d)
	}
	for _, s := range obs.Slices() {
		// A slice a pod uses keeps its spec (under either name) even without an allocation.
		for _, name := range []string{s.DeviceID(), s.MIGUUID} {
			if _, used := w.Usage[name]; used && s.MIGUUID != "" {
				keep[name] = true
			}
		}
	}
	if removed, err := r.opts.CDI.RemoveStale(keep); err != nil {
		r.opts.Metrics.CDIWrites.WithLabelValues("error").Inc()
		r.log(ctx).Error(err, "removing stale CDI specs")
		retry = true
	} else if len(removed) > 0 {
		r.opts.Metrics.CDIWrites.WithLabelValues("removed").Add(float64(len(removed)))
	}
	if r.opts.Advertiser != nil {
		r.opts.Advertiser.SetDevices(devices)
	}
	return retry, readyIDs
}

func (r *Reconciler) writeCDI(obs *engine.Observation, s engine.Slice, name string) error {
	spec := engine.CDISlice(obs.GPUByUUID(s.GPU), s)
	spec.Name = name
	_, err := r.opts.CDI.Write(spec)
	result := "success"
	if err != nil {
		result = "error"
	}
	r.opts.Metrics.CDIWrites.WithLabelValues(result).Inc()
	if err != nil {
		return fmt.Errorf("CDI spec for %s (%s): %w", s.Slot, s.MIGUUID, err)
	}
	return nil
}

// writeWholeCDI writes the CDI spec of a whole GPU bound to an allocation (cdi.WriteWhole).
func (r *Reconciler) writeWholeCDI(obs *engine.Observation, s engine.Slice) error {
	g := obs.GPUByUUID(s.GPU)
	if g == nil {
		return fmt.Errorf("CDI spec for %s: the GPU is not on the node", s.Slot)
	}
	_, err := r.opts.CDI.WriteWhole(engine.WholeCDI(g))
	result := "success"
	if err != nil {
		result = "error"
	}
	r.opts.Metrics.CDIWrites.WithLabelValues(result).Inc()
	if err != nil {
		return fmt.Errorf("CDI spec for %s: %w", s.Slot, err)
	}
	return nil
}

// deviceFor is the device the kubelet is told of for slice s: its slot's device ID under its
// resource (resourceOf); a whole GPU's visible device is the GPU itself (its UUID).
func deviceFor(obs *engine.Observation, s engine.Slice) plugin.Device {
	g := obs.GPUByUUID(s.GPU)
	visible, unusable := s.MIGUUID, g.Unusable()
	if s.Whole() {
		visible, unusable = s.GPU, g.UnusableWhole()
	}
	return plugin.Device{
		ID: s.DeviceID(), MIGUUID: visible, Resource: resourceOf(s.Slot), CDIName: cdi.QualifiedName(s.DeviceID()),
		Healthy: unusable == "" && s.Unhealthy == "",
	}
}
