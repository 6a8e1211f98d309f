// Package agent is the node agent's realizer: it rebuilds the node's MIG state
// from NVML and the node's SliceAllocations on every reconcile, creates the
// slices allocations want at their exact placements, destroys released and
// orphaned ones (never one in use), writes CDI specs, advertises devices to
// the kubelet and publishes the node's NodeAccelerator.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
	"github.com/slicer-operator/slicer/internal/mig"
)

// UsageSource reports which MIG devices the kubelet assigned to which pod
// (device ID → "namespace/name" of the pod), e.g. from the PodResources API.
type UsageSource interface {
	DeviceUsage(ctx context.Context) (map[string]string, error)
}

// Advertiser receives the devices to advertise to the kubelet.
type Advertiser interface {
	SetDevices(devs []plugin.Device)
}

// Options configure the reconciler.
type Options struct {
	NodeName string
	Library  nvml.Library
	Emulated bool
	CDI      *cdi.Writer
	// Usage may be nil (no kubelet information: NVML's in-use check remains).
	Usage UsageSource
	// Advertiser may be nil.
	Advertiser Advertiser
	// OrphanGrace is how long a slice no allocation holds is kept.
	OrphanGrace time.Duration
	// Resync is the periodic recovery interval.
	Resync  time.Duration
	Metrics *Metrics
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Reconciler realizes the node's SliceAllocations. One key (the node) is
// reconciled at a time; MIG mutations run one goroutine per GPU.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options

	mu          sync.Mutex
	initialized bool
	orphanSince map[string]time.Time
	firstSeen   map[types.NamespacedName]time.Time
	retries     int
}

// New returns a reconciler.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Resync == 0 {
		opts.Resync = time.Minute
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts, orphanSince: map[string]time.Time{},
		firstSeen: map[types.NamespacedName]time.Time{}}
}

// SetupWithManager registers the controller; every event maps to the node's
// key. trigger (may be nil) requests a reconcile (e.g. after a kubelet Allocate).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, trigger <-chan event.GenericEvent) error {
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: r.opts.NodeName}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named("slicer-agent").
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Watches(&slicerv1alpha1.SliceAllocation{}, toNode).
		Watches(&slicerv1alpha1.NodeAccelerator{}, toNode).
		Watches(&corev1.Node{}, toNode)
	if trigger != nil {
		b = b.WatchesRawSource(source.Channel(trigger, toNode))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("set up agent controller: %w", err)
	}
	return nil
}

// Reconcile observes, plans, acts and reports; see the package comment.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx).WithValues("node", r.opts.NodeName)
	now := r.opts.Now()

	conflict, err := r.ownershipConflict(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !r.initialized {
		if err := r.opts.Library.Init(); err != nil {
			r.opts.Metrics.nvmlError(err)
			log.Error(err, "NVML unavailable")
			if perr := r.publish(ctx, nodeView{Emulated: r.opts.Emulated, DriverErr: err, Conflict: conflict}); perr != nil {
				return ctrl.Result{}, perr
			}
			return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
		}
		r.initialized = true
	}
	var list slicerv1alpha1.SliceAllocationList
	if err := r.client.List(ctx, &list, client.MatchingLabels{slicerv1alpha1.LabelNode: r.opts.NodeName}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list allocations: %w", err)
	}
	allocs := map[types.NamespacedName]*slicerv1alpha1.SliceAllocation{}
	var needFinalizer []*slicerv1alpha1.SliceAllocation
	for i := range list.Items {
		a := &list.Items[i]
		if a.Spec.NodeName != r.opts.NodeName {
			continue
		}
		allocs[client.ObjectKeyFromObject(a)] = a
		if a.DeletionTimestamp == nil {
			if _, ok := r.firstSeen[client.ObjectKeyFromObject(a)]; !ok {
				r.firstSeen[client.ObjectKeyFromObject(a)] = now
			}
			if !controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) {
				needFinalizer = append(needFinalizer, a)
			}
		}
	}
	// The list comes from the cache: an allocation it still shows may already be gone
	// (the scheduler's Unreserve, a deleted pod). Adding the finalizer is the check: one
	// that is gone gets no slice, or the slice would be left to the orphan grace period.
	var goneMu sync.Mutex
	if err := parallel(needFinalizer, func(a *slicerv1alpha1.SliceAllocation) error {
		gone, err := r.ensureFinalizer(ctx, a)
		if gone {
			goneMu.Lock()
			delete(allocs, client.ObjectKeyFromObject(a))
			goneMu.Unlock()
		}
		return err
	}); err != nil {
		return ctrl.Result{}, err
	}
	obs, err := observe(r.opts.Library, r.opts.Metrics)
	if err != nil {
		if nvml.IsDriverUnavailable(err) {
			r.initialized = false
		}
		if perr := r.publish(ctx, nodeView{Emulated: r.opts.Emulated, DriverErr: err, Conflict: conflict}); perr != nil {
			return ctrl.Result{}, errors.Join(err, perr)
		}
		return ctrl.Result{}, fmt.Errorf("observe GPUs: %w", err)
	}

	// Allocations NVML can never satisfy fail; the rest are planned.
	statuses := map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{}
	var wants []Want
	for k, a := range allocs {
		w := wantFromAllocation(a)
		if !w.Deleting {
			if reason, msg := validate(obs, a); reason != "" {
				statuses[k] = failed(a, reason, msg)
				continue
			}
		}
		wants = append(wants, w)
	}
	var usage map[string]string
	if r.opts.Usage != nil {
		if usage, err = r.opts.Usage.DeviceUsage(ctx); err != nil {
			log.Error(err, "kubelet pod resources unavailable; relying on NVML's in-use check")
			usage = nil
		}
	}
	in := planInput{Slices: obs.slices(), Wants: wants, Use: usage, OrphanSince: r.orphanSince, Now: now, Grace: r.opts.OrphanGrace}
	p := plan(in)
	r.trackOrphans(p, now)

	retry := false
	released := map[types.NamespacedName]bool{}
	mutated := false
	if conflict {
		for k := range p.Create {
			statuses[k] = pending(allocs[k], slicerv1alpha1.ReasonForeignMIGManager, "another MIG manager owns the node; the agent changes no MIG geometry")
		}
		for k := range p.Finish {
			statuses[k] = pending(allocs[k], slicerv1alpha1.ReasonForeignMIGManager, "another MIG manager owns the node; the agent changes no MIG geometry")
		}
		for k, s := range p.Release {
			if s == nil {
				released[k] = true
			}
		}
	} else {
		var jobs []*job
		for k, slot := range p.Create {
			jobs = append(jobs, &job{key: k.String(), kind: jobCreate, slot: slot})
		}
		for k, s := range p.Finish {
			jobs = append(jobs, &job{key: k.String(), kind: jobFinish, slot: s.Slot, slice: s})
		}
		for k, s := range p.Release {
			if s == nil {
				released[k] = true
				log.Info("allocation released with no slice to destroy", "allocation", k, "device", allocs[k].Status.MIGDeviceUUID)
				continue
			}
			jobs = append(jobs, &job{key: k.String(), kind: jobDestroy, slot: s.Slot, slice: *s})
		}
		for _, o := range p.Orphans {
			if o.Destroy {
				jobs = append(jobs, &job{key: "orphan/" + orphanKey(o.Slice), kind: jobDestroy, slot: o.Slot, slice: o.Slice})
			}
		}
		if err := r.markCreating(ctx, allocs, p); err != nil {
			return ctrl.Result{}, err
		}
		runJobs(obs, r.opts.Metrics, jobs)
		for _, j := range jobs {
			mutated = true
			k, isAlloc := keyOf(j.key, allocs)
			switch {
			case j.result.Err == nil && j.kind == jobDestroy && isAlloc:
				released[k] = true
				r.opts.Metrics.OrphansReclaim.WithLabelValues("pod_gone").Inc()
				r.event(allocs[k], corev1.EventTypeNormal, "SliceDestroyed", "destroyed %s (%s)", j.slice.Slot, j.slice.MIGUUID)
			case j.result.Err == nil && j.kind == jobDestroy:
				delete(r.orphanSince, orphanKey(j.slice))
				r.opts.Metrics.OrphansReclaim.WithLabelValues("no_allocation").Inc()
				log.Info("orphan slice reclaimed", "gpu", j.slice.GPU, "profile", j.slice.Profile, "start", j.slice.Start)
				r.event(&slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName}}, corev1.EventTypeNormal,
					"OrphanReclaimed", "destroyed %s (%s): no allocation held it for the grace period", j.slice.Slot, j.slice.MIGUUID)
			case j.result.Err == nil:
				p.Bound[k] = j.result.Slice
				log.Info("slice created", "allocation", j.key, "gpu", j.slot.GPU, "profile", j.slot.Profile, "start", j.slot.Start, "device", j.result.Slice.MIGUUID)
			default:
				retry = true
				log.Error(j.result.Err, "MIG operation failed", "job", j.key)
				reason, msg := slicerv1alpha1.ReasonNVMLError, j.result.Err.Error()
				if nvml.IsInUse(j.result.Err) {
					reason = slicerv1alpha1.ReasonInUse
				}
				if isAlloc {
					r.event(allocs[k], corev1.EventTypeWarning, reason, "%s", msg)
					if !allocs[k].DeletionTimestamp.IsZero() {
						continue
					}
					if nvml.ReturnOf(j.result.Err) == nvml.ErrorInvalidArgument {
						statuses[k] = failed(allocs[k], slicerv1alpha1.ReasonInvalidPlacement, msg)
					} else {
						statuses[k] = creating(allocs[k], reason, msg)
					}
				}
			}
		}
	}
	if mutated {
		if obs, err = observe(r.opts.Library, r.opts.Metrics); err != nil {
			return ctrl.Result{}, fmt.Errorf("observe GPUs after changes: %w", err)
		}
	}
	for k, msg := range p.ReleaseWait {
		retry = true
		r.event(allocs[k], corev1.EventTypeWarning, slicerv1alpha1.ReasonInUse, "not destroying: %s", msg)
	}
	for k, why := range p.Blocked {
		retry = true
		statuses[k] = pending(allocs[k], why[0], why[1])
	}
	for k, msg := range p.Conflict {
		retry = true
		if allocs[k].Status.State != slicerv1alpha1.AllocationFailed {
			r.opts.Metrics.Conflicts.Inc()
			r.event(allocs[k], corev1.EventTypeWarning, "PlacementConflict", "%s", msg)
		}
		statuses[k] = failed(allocs[k], "PlacementConflict", msg)
	}

	// CDI specs, then the kubelet, then Ready.
	var devices []plugin.Device
	keep := map[string]bool{}
	for k, s := range p.Bound {
		if _, bad := statuses[k]; bad || !s.Complete() {
			continue
		}
		keep[s.MIGUUID] = true
		if err := r.writeCDI(obs, s); err != nil {
			retry = true
			statuses[k] = creating(allocs[k], "CDIError", err.Error())
			continue
		}
		devices = append(devices, deviceFor(obs, s))
		statuses[k] = ready(allocs[k], s)
	}
	for uuid := range p.InUse {
		keep[uuid] = true
	}
	if removed, err := r.opts.CDI.RemoveStale(keep); err != nil {
		r.opts.Metrics.CDIWrites.WithLabelValues("error").Inc()
		log.Error(err, "removing stale CDI specs")
		retry = true
	} else if len(removed) > 0 {
		r.opts.Metrics.CDIWrites.WithLabelValues("removed").Add(float64(len(removed)))
	}
	if r.opts.Advertiser != nil {
		r.opts.Advertiser.SetDevices(devices)
	}
	if err := r.writeStatuses(ctx, allocs, statuses, now); err != nil {
		return ctrl.Result{}, err
	}
	var done []*slicerv1alpha1.SliceAllocation
	for k := range released {
		done = append(done, allocs[k])
		delete(r.firstSeen, k)
	}
	if err := parallel(done, func(a *slicerv1alpha1.SliceAllocation) error { return r.removeFinalizer(ctx, a) }); err != nil {
		return ctrl.Result{}, err
	}
	view := nodeView{Emulated: r.opts.Emulated, Conflict: conflict, Obs: obs, States: map[string]slicerv1alpha1.SliceState{}, Holders: map[string]types.NamespacedName{}}
	for k, s := range p.Bound {
		view.States[sliceKey(s)], view.Holders[sliceKey(s)] = slicerv1alpha1.SliceAllocated, k
	}
	for k, s := range p.Release {
		if s != nil && !released[k] {
			view.States[sliceKey(*s)], view.Holders[sliceKey(*s)] = slicerv1alpha1.SlicePendingDelete, k
		}
	}
	if err := r.publish(ctx, view); err != nil {
		if apierrors.IsConflict(err) {
			// Our cache has not seen our previous write yet; try again.
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	r.recordMetrics(obs, view, allocs)
	if retry {
		// Exponential backoff while something waits (in use, faults, orphans
		// in the way); any watch event still reconciles at once.
		r.retries++
		return ctrl.Result{RequeueAfter: min(250*time.Millisecond<<min(r.retries, 8), r.nextResync(now))}, nil
	}
	r.retries = 0
	return ctrl.Result{RequeueAfter: r.nextResync(now)}, nil
}

func keyOf(key string, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation) (types.NamespacedName, bool) {
	for k := range allocs {
		if k.String() == key {
			return k, true
		}
	}
	return types.NamespacedName{}, false
}

// nextResync is the resync interval, shortened to the next orphan deadline.
func (r *Reconciler) nextResync(now time.Time) time.Duration {
	next := r.opts.Resync
	for _, since := range r.orphanSince {
		if d := since.Add(r.opts.OrphanGrace).Sub(now); d < next {
			next = max(d, 100*time.Millisecond)
		}
	}
	return next
}

func (r *Reconciler) trackOrphans(p Plan, now time.Time) {
	seen := map[string]bool{}
	for _, o := range p.Orphans {
		k := orphanKey(o.Slice)
		seen[k] = true
		if _, ok := r.orphanSince[k]; !ok {
			r.orphanSince[k] = now
		}
	}
	for k := range r.orphanSince {
		if !seen[k] {
			delete(r.orphanSince, k)
		}
	}
}

func (r *Reconciler) ownershipConflict(ctx context.Context) (bool, error) {
	var node corev1.Node
	err := r.client.Get(ctx, types.NamespacedName{Name: r.opts.NodeName}, &node)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get node: %w", err)
	}
	_, conflict := node.Labels[slicerv1alpha1.LabelNVIDIAMIGConfig]
	return conflict, nil
}

// validate returns a Failed reason for an allocation the node cannot realize.
func validate(obs *Observation, a *slicerv1alpha1.SliceAllocation) (reason, msg string) {
	g := obs.gpu(a.Spec.GPUUUID)
	if g == nil {
		return slicerv1alpha1.ReasonGPUNotFound, fmt.Sprintf("GPU %s is not on node %s", a.Spec.GPUUUID, a.Spec.NodeName)
	}
	if !g.MIGSupported || g.MIGMode != nvml.MIGEnabled {
		return slicerv1alpha1.ReasonMIGModeOff, fmt.Sprintf("GPU %s has MIG mode off; the agent never changes MIG mode", g.UUID)
	}
	if !g.Model.Valid() {
		return slicerv1alpha1.ReasonInvalidPlacement, fmt.Sprintf("GPU %s (%s) is not a MIG model Slicer knows", g.UUID, g.ProductName)
	}
	p, err := g.Model.Profile(string(a.Spec.Profile))
	if err != nil {
		return slicerv1alpha1.ReasonInvalidPlacement, err.Error()
	}
	for _, pl := range p.Placements() {
		if pl == (mig.Placement{Start: int(a.Spec.Placement.Start), Size: int(a.Spec.Placement.Size)}) {
			return "", ""
		}
	}
	return slicerv1alpha1.ReasonInvalidPlacement, fmt.Sprintf("%s has no placement {start %d, size %d} on %s", p.Name, a.Spec.Placement.Start, a.Spec.Placement.Size, g.Model)
}

func base(a *slicerv1alpha1.SliceAllocation) slicerv1alpha1.SliceAllocationStatus {
	return slicerv1alpha1.SliceAllocationStatus{ObservedGeneration: a.Generation}
}

func failed(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationFailed, reason, truncate(msg, 1024)
	return s
}

func pending(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationPending, reason, truncate(msg, 1024)
	return s
}

func creating(a *slicerv1alpha1.SliceAllocation, reason, msg string) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	s.State, s.Reason, s.Message = slicerv1alpha1.AllocationCreating, reason, truncate(msg, 1024)
	return s
}

func ready(a *slicerv1alpha1.SliceAllocation, sl Slice) slicerv1alpha1.SliceAllocationStatus {
	s := base(a)
	gi, ci := int32(sl.GI), int32(sl.CI)
	s.State, s.MIGDeviceUUID, s.GPUInstanceID, s.ComputeInstanceID = slicerv1alpha1.AllocationReady, sl.MIGUUID, &gi, &ci
	s.Message = "MIG device " + sl.MIGUUID + " is ready"
	if sl.GPU != a.Spec.GPUUUID || sl.Start != int(a.Spec.Placement.Start) || sl.Size != int(a.Spec.Placement.Size) {
		s.ActualPlacement = &slicerv1alpha1.Placement{Start: int32(sl.Start), Size: int32(sl.Size)}
		if sl.GPU != a.Spec.GPUUUID {
			s.ActualGPUUUID = sl.GPU
		}
		s.Message = fmt.Sprintf("the kubelet gave the pod MIG device %s on %s", sl.MIGUUID, sl.Slot)
	}
	return s
}

// markCreating writes Creating for allocations about to be created.
func (r *Reconciler) markCreating(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, p Plan) error {
	st := map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus{}
	for k := range p.Create {
		st[k] = creating(allocs[k], "", "creating the GPU instance and compute instance")
	}
	for k := range p.Finish {
		st[k] = creating(allocs[k], "", "creating the compute instance of an existing GPU instance")
	}
	return r.writeStatuses(ctx, allocs, st, time.Time{})
}

// writeStatuses patches changed statuses, a few at a time.
func (r *Reconciler) writeStatuses(ctx context.Context, allocs map[types.NamespacedName]*slicerv1alpha1.SliceAllocation, st map[types.NamespacedName]slicerv1alpha1.SliceAllocationStatus, now time.Time) error {
	type change struct {
		a *slicerv1alpha1.SliceAllocation
		s slicerv1alpha1.SliceAllocationStatus
	}
	var changes []change
	for k, s := range st {
		a := allocs[k]
		if a == nil || equality.Semantic.DeepEqual(a.Status, s) {
			continue
		}
		if !now.IsZero() && s.State == slicerv1alpha1.AllocationReady && a.Status.State != slicerv1alpha1.AllocationReady {
			if first, ok := r.firstSeen[k]; ok {
				r.opts.Metrics.RealizeDuration.Observe(r.opts.Now().Sub(first).Seconds())
			}
			r.event(a, corev1.EventTypeNormal, "SliceReady", "MIG device %s ready", s.MIGDeviceUUID)
		}
		changes = append(changes, change{a: a, s: s})
	}
	return parallel(changes, func(c change) error {
		patch := client.MergeFromWithOptions(c.a.DeepCopy(), client.MergeFromWithOptimisticLock{})
		c.a.Status = c.s
		if err := r.client.Status().Patch(ctx, c.a, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("status of %s/%s: %w", c.a.Namespace, c.a.Name, err)
		}
		return nil
	})
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

// ensureFinalizer adds the agent's finalizer; gone reports an allocation that
// no longer exists.
func (r *Reconciler) ensureFinalizer(ctx context.Context, a *slicerv1alpha1.SliceAllocation) (gone bool, err error) {
	if controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(a, slicerv1alpha1.AllocationFinalizer)
	if err := r.client.Patch(ctx, a, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("add finalizer to %s/%s: %w", a.Namespace, a.Name, err)
	}
	return false, nil
}

func (r *Reconciler) removeFinalizer(ctx context.Context, a *slicerv1alpha1.SliceAllocation) error {
	if !controllerutil.ContainsFinalizer(a, slicerv1alpha1.AllocationFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(a, slicerv1alpha1.AllocationFinalizer)
	if err := r.client.Patch(ctx, a, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer from %s/%s: %w", a.Namespace, a.Name, err)
	}
	return nil
}

func (r *Reconciler) event(obj client.Object, typ, reason, format string, args ...any) {
	if r.recorder != nil && obj != nil {
		r.recorder.Eventf(obj, nil, typ, reason, "Reconcile", format, args...)
	}
}

func (r *Reconciler) writeCDI(obs *Observation, s Slice) error {
	g := obs.gpu(s.GPU)
	_, err := r.opts.CDI.Write(cdi.Slice{MIGUUID: s.MIGUUID, GPUUUID: s.GPU, GPUMinor: g.Index, Profile: s.Profile,
		PlacementStart: s.Start, PlacementSize: s.Size, GPUInstance: s.GI, ComputeInst: s.CI})
	result := "success"
	if err != nil {
		result = "error"
	}
	r.opts.Metrics.CDIWrites.WithLabelValues(result).Inc()
	if err != nil {
		return fmt.Errorf("CDI spec for %s: %w", s.MIGUUID, err)
	}
	return nil
}

func deviceFor(obs *Observation, s Slice) plugin.Device {
	g := obs.gpu(s.GPU)
	return plugin.Device{
		ID: s.MIGUUID, Resource: mig.ResourceName(s.Profile), CDIName: cdi.QualifiedName(s.MIGUUID),
		Healthy: g != nil && g.Healthy,
	}
}

// publish creates the node's NodeAccelerator if needed and writes its status
// when it changed.
func (r *Reconciler) publish(ctx context.Context, v nodeView) error {
	var na slicerv1alpha1.NodeAccelerator
	err := r.client.Get(ctx, types.NamespacedName{Name: r.opts.NodeName}, &na)
	if apierrors.IsNotFound(err) {
		na = slicerv1alpha1.NodeAccelerator{
			ObjectMeta: metav1.ObjectMeta{Name: r.opts.NodeName},
			Spec:       slicerv1alpha1.NodeAcceleratorSpec{NodeName: r.opts.NodeName},
		}
		if err := r.client.Create(ctx, &na); err != nil {
			return fmt.Errorf("create NodeAccelerator: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("get NodeAccelerator: %w", err)
	}
	st := renderStatus(na.Status, na.Generation, v)
	if equality.Semantic.DeepEqual(na.Status, st) {
		return nil
	}
	wasConflict := hasTrue(na.Status.Conditions, slicerv1alpha1.ConditionOwnershipConflict)
	wasDriverDown := hasTrue(na.Status.Conditions, slicerv1alpha1.ConditionDriverNotReady)
	patch := client.MergeFromWithOptions(na.DeepCopy(), client.MergeFromWithOptimisticLock{})
	na.Status = st
	if err := r.client.Status().Patch(ctx, &na, patch); err != nil {
		return fmt.Errorf("NodeAccelerator status: %w", err)
	}
	if v.Conflict && !wasConflict {
		r.event(&na, corev1.EventTypeWarning, slicerv1alpha1.ReasonForeignMIGManager, "node carries %s: the agent refuses to change MIG geometry", slicerv1alpha1.LabelNVIDIAMIGConfig)
	}
	if v.DriverErr != nil && !wasDriverDown {
		r.event(&na, corev1.EventTypeWarning, slicerv1alpha1.ReasonNVMLUnavailable, "%s", v.DriverErr.Error())
	}
	return nil
}

func hasTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
