// Package agent is the device-plugin frontend's allocation reconciler: it rebuilds the
// node's MIG state from NVML (device-plugin/engine) and the node's SliceAllocations on every
// reconcile, creates the slices allocations want at their exact placements through the
// engine's realizer, destroys released and orphaned ones (never one in use), writes CDI
// specs, advertises devices to the kubelet and publishes the node's NodeAccelerator through
// the engine's writer.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
)

// UsageSource reports which devices the kubelet assigned to which pod (device ID, a slot's
// mig.Slot.DeviceID → "namespace/name" of the pod), e.g. from the PodResources API.
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
	// Kubelet, when set, says which devices the kubelet holds as allocatable: an allocation
	// turns Ready only once its device is there (awaitKubelet).
	Kubelet KubeletDevices
	// KubeletWait bounds how long one reconcile waits for the kubelet to list a device
	// (default 3s); past it the allocation stays Creating and is retried.
	KubeletWait time.Duration
	// OrphanGrace is how long a slice no allocation holds is kept.
	OrphanGrace time.Duration
	// Live reads from the API server: the evidence that an allocation's pod is gone (see
	// podsGone). Nil: the agent does not release allocations whose pod is gone (they wait
	// for the garbage collector, which acts only on those with an owner reference).
	Live client.Reader
	// Resync is the periodic recovery interval.
	Resync time.Duration
	// PublishInterval is the least time between two NodeAccelerator status writes that
	// only move slices (engine.StatusWriter); default engine.DefaultPublishInterval, negative: no
	// coalescing.
	PublishInterval time.Duration
	Metrics         *engine.Metrics
	// GPUModes is the Slicer's spec.gpuModes (--gpu-modes): with policies the agent switches
	// GPUs' MIG modes (modes.go); empty, it switches none, as before GPU modes.
	GPUModes []slicerv1alpha1.GPUModePolicy
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
	orphanSince engine.OrphanClock
	firstSeen   map[types.NamespacedName]time.Time
	retries     int
	status      *engine.StatusWriter
	own         ownWrites
	// health is what NVML's events say of the GPUs (engine.Health, watched by a runnable
	// SetupWithManager adds); healthKick brings a reconcile when it changes.
	health     *engine.Health
	healthKick chan event.GenericEvent
	// noted is, per allocation UID, the unhealthy reason its pod was last told in an Event.
	noted engine.Told
}

// New returns a reconciler.
func New(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KubeletWait == 0 {
		opts.KubeletWait = 3 * time.Second
	}
	if opts.Resync == 0 {
		opts.Resync = time.Minute
	}
	if opts.PublishInterval == 0 {
		opts.PublishInterval = engine.DefaultPublishInterval
	}
	if opts.Metrics == nil {
		opts.Metrics = engine.NewMetrics(nil)
	}
	r := &Reconciler{client: c, recorder: recorder, opts: opts, orphanSince: engine.OrphanClock{},
		firstSeen: map[types.NamespacedName]time.Time{}, noted: engine.Told{},
		status:     engine.NewStatusWriter(c, recorder, opts.NodeName, opts.PublishInterval, opts.Now).WithMetrics(opts.Metrics),
		healthKick: make(chan event.GenericEvent, 1)}
	r.health = engine.NewHealth(func() {
		select {
		case r.healthKick <- event.GenericEvent{Object: &slicerv1alpha1.NodeAccelerator{ObjectMeta: metav1.ObjectMeta{Name: opts.NodeName}}}:
		default:
		}
	})
	return r
}

// SetupWithManager registers the controller; every event maps to the node's
// key. trigger (may be nil) requests a reconcile (e.g. after a kubelet Allocate).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, trigger <-chan event.GenericEvent) error {
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request {
		return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: r.opts.NodeName}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).Named(slicerv1alpha1.AgentName).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Watches(&slicerv1alpha1.SliceAllocation{}, toNode).
		Watches(&slicerv1alpha1.NodeAccelerator{}, toNode).
		Watches(&corev1.Node{}, toNode).
		Watches(&nodev1.RuntimeClass{}, toNode)
	if trigger != nil {
		b = b.WatchesRawSource(source.Channel(trigger, toNode))
	}
	b = b.WatchesRawSource(source.Channel(r.healthKick, toNode))
	watch := func(ctx context.Context) error {
		r.health.Watch(ctx, r.opts.Library, r.opts.Metrics, mgr.GetLogger().WithName("health").WithValues("node", r.opts.NodeName))
		return nil
	}
	if err := mgr.Add(manager.RunnableFunc(watch)); err != nil {
		return fmt.Errorf("add the GPU health watcher: %w", err)
	}
	if r.opts.Live != nil {
		b = b.Watches(&corev1.Pod{}, toNode, builder.WithPredicates(podEnds))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("set up agent controller: %w", err)
	}
	return nil
}

// podEnds passes the pod events that may leave an allocation to release (podsGone): a
// pod deleted, or one whose phase turned Succeeded or Failed. Other pod changes do not
// concern the agent. An agent that starts finds the pods already finished by its first
// reconcile, which lists every allocation.
var podEnds = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		return ok1 && ok2 && !finished(o) && finished(n)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// Reconcile observes (observe.go), decides (decide.go: decide, then settle after the GPU
// work) and writes (write.go); see the package comment.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	log := r.log(ctx)
	now := r.opts.Now()

	conflict, bypass, nodeLabels, err := r.nodeFacts(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !r.initialized {
		if err := r.opts.Library.Init(); err != nil {
			r.opts.Metrics.NVMLError(err)
			log.Error(err, "NVML unavailable")
			if _, perr := r.status.Publish(ctx, engine.NodeView{Emulated: r.opts.Emulated, DriverErr: err, Conflict: conflict, Bypass: bypass}); perr != nil {
				return ctrl.Result{}, perr
			}
			// Backoff from half a second to 30 s: a driver that is loading comes back soon,
			// one that is not there is asked twice a minute.
			r.retries++
			return ctrl.Result{RequeueAfter: min(250*time.Millisecond<<min(r.retries, 7), 30*time.Second)}, nil
		}
		r.initialized = true
		r.health.Initialized()
	}
	allocs, needFinalizer, err := r.allocations(ctx, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureFinalizers(ctx, allocs, needFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	obs, err := r.observe()
	if err != nil {
		if nvml.IsDriverUnavailable(err) {
			r.initialized = false
		}
		if _, perr := r.status.Publish(ctx, engine.NodeView{Emulated: r.opts.Emulated, DriverErr: err, Conflict: conflict, Bypass: bypass}); perr != nil {
			return ctrl.Result{}, errors.Join(err, perr)
		}
		return ctrl.Result{}, fmt.Errorf("observe GPUs: %w", err)
	}
	gone, err := r.podsGone(ctx, allocs)
	if err != nil {
		return ctrl.Result{}, err
	}
	w := world{Node: r.opts.NodeName, Conflict: conflict, Bypass: bypass, Obs: obs, Allocs: allocs, Usage: r.usage(ctx), PodGone: gone,
		Modes: engine.ModePolicies(r.opts.GPUModes, obs, nodeLabels, log), OrphanSince: r.orphanSince, Now: now, Grace: r.opts.OrphanGrace}

	d := decide(w)
	r.trackOrphans(d.Plan, now)
	if err := r.collect(ctx, allocs, d.Collect, gone); err != nil {
		return ctrl.Result{}, err
	}
	r.record(allocs, d.Notes)
	for _, k := range sortedKeys(d.Released) {
		log.Info("allocation released with no slice to destroy", "allocation", k, "device", allocs[k].Status.MIGDeviceUUID)
	}
	if len(d.Jobs) > 0 {
		runJobs(obs, r.opts.Metrics, d.Jobs)
	}
	o := settle(w, d, log)
	if o.Mutated {
		if obs, err = r.observe(); err != nil {
			r.record(allocs, o.Notes)
			return ctrl.Result{}, fmt.Errorf("observe GPUs after changes: %w", err)
		}
		o.confirm(obs, d.Jobs)
	}
	for _, k := range o.Forget {
		r.orphanSince.Forget(k)
	}
	for reason, n := range o.Reclaimed {
		r.opts.Metrics.OrphansReclaim.WithLabelValues(reason).Add(float64(n))
	}
	r.opts.Metrics.Conflicts.Add(float64(o.Conflicts))
	r.record(allocs, o.Notes)

	// MIG mode switches, on the GPUs as the slice work left them; then the GPUs as NVML
	// reports them after the switches.
	modeSwitches, modeDone, called, modeRetry := engine.SwitchModes(obs, modeSteps(w, obs, o.Statuses), r.opts.Metrics, log)
	if called {
		if obs, err = r.observe(); err != nil {
			return ctrl.Result{}, fmt.Errorf("observe GPUs after MIG mode switches: %w", err)
		}
	}
	o.Retry = o.Retry || modeRetry

	// CDI specs, then the kubelet, then Ready once the kubelet has the device.
	retry, readyIDs := r.writeDevices(ctx, w, obs, o)
	retry = r.awaitKubelet(ctx, w, o, readyIDs) || retry || o.Retry
	if err := r.writeStatuses(ctx, allocs, o.Statuses); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.removeFinalizers(ctx, allocs, o.Released); err != nil {
		return ctrl.Result{}, err
	}
	r.tellUnhealthy(w, obs, o)
	view := o.view(w, obs, d.Plan.Release)
	view.Emulated, view.ModePolicies, view.ModeSwitches, view.ModeSwitchesDone = r.opts.Emulated, w.Modes, modeSwitches, modeDone
	// The NodeAccelerator last: its writes are coalesced (publish.go), so a slice's Ready
	// never waits for it, and a write still pending brings the next reconcile forward.
	pending, err := r.status.Publish(ctx, view)
	if err != nil {
		if apierrors.IsConflict(err) {
			// Our cache has not seen our previous write yet; try again.
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	r.recordMetrics(obs, view, allocs)
	r.opts.Metrics.RecordModes(obs, modeSwitches)
	after := r.nextResync(now)
	if retry {
		// Exponential backoff while something waits (in use, faults, orphans
		// in the way); any watch event still reconciles at once.
		r.retries++
		after = min(250*time.Millisecond<<min(r.retries, 8), after)
	} else {
		r.retries = 0
	}
	if pending > 0 {
		after = min(after, pending)
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// observe reads the GPUs and marks what NVML's events made unhealthy.
func (r *Reconciler) observe() (*engine.Observation, error) {
	obs, err := engine.Observe(r.opts.Library, r.opts.Metrics)
	r.health.Apply(obs)
	return obs, err
}

func (r *Reconciler) log(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx).WithValues("node", r.opts.NodeName)
}

// nextResync is the resync interval, shortened to the next orphan deadline.
func (r *Reconciler) nextResync(now time.Time) time.Duration {
	return r.orphanSince.Next(now, r.opts.OrphanGrace, r.opts.Resync)
}
