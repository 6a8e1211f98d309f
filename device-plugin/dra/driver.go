// Package dra is Slicer's kubelet DRA plugin (driver migdra.DriverName): it publishes the
// node's pool of MIG devices (internal/mig/migdra) and, when the kubelet prepares a
// ResourceClaim, creates the GPU instance and compute instance at exactly the placement the
// allocated device names, through the node engine's NVML realizer (device-plugin/engine), and writes the claim's CDI spec.
// State rules: see state.go; design: docs/design/dra.md.
package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Options configure a Driver.
type Options struct {
	// NodeName is this node; it is also the pool's name.
	NodeName string
	Library  nvml.Library
	// Emulated: Library is the emulated backend (the NodeAccelerator's driver state).
	Emulated bool
	Client   kubernetes.Interface
	// Status writes the node's NodeAccelerator status (engine.StatusWriter); nil: none is
	// written. Events (may be nil) get the status writer's events.
	Status client.Client
	Events events.EventRecorder
	// PublishInterval is the least time between two NodeAccelerator status writes that only
	// move slices (engine.Options.PublishInterval).
	PublishInterval time.Duration
	CDI             *cdi.Writer
	Metrics         *engine.Metrics
	// OrphanGrace is how long an instance no allocated claim explains is kept.
	OrphanGrace time.Duration
	// Resync is how often orphans are swept and the pool checked (default one minute).
	Resync time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	Log logr.Logger
	// GPUModes is the Slicer's spec.gpuModes (--gpu-modes): with policies the driver
	// publishes the GPUs they let it switch both whole and sliced and switches them as the
	// claims need (whole.go); without, every GPU is published as its mode is, as before.
	GPUModes []slicerv1alpha1.GPUModePolicy
}

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	opts Options
	// mu serializes NVML mutations, the orphan clock and the published order.
	mu          sync.Mutex
	orphanSince engine.OrphanClock
	last        *published
	publisher   interface {
		PublishResources(context.Context, resourceslice.DriverResources) error
	}
	// notServing is why the kubelet plugin is not serving, while publisher is nil.
	notServing  error
	status      *engine.StatusWriter
	claimLister resourcelisters.ResourceClaimLister
	health      *healthBook
	kick        chan struct{}
	// gpuHealth is what NVML's events say of the GPUs (engine.Health, watched while Run runs).
	gpuHealth *engine.Health
	// told is, per claim UID, the unhealthy reason its pods were last told in an Event.
	told engine.Told
	// modeDone is how long each SetMIGMode call that made a GPU's mode current at once took,
	// by UUID, since the last status write (which times the switch by it).
	modeDone map[string]time.Duration
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns a driver; Run starts it.
func New(opts Options) *Driver {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Resync <= 0 {
		opts.Resync = time.Minute
	}
	d := &Driver{opts: opts, orphanSince: engine.OrphanClock{}, kick: make(chan struct{}, 1),
		notServing: errors.New("the kubelet plugin is not started"), health: newHealthBook(), told: engine.Told{}, modeDone: map[string]time.Duration{}}
	d.gpuHealth = engine.NewHealth(d.poke)
	if opts.Status != nil {
		d.status = engine.NewStatusWriter(opts.Status, opts.Events, opts.NodeName, opts.PublishInterval, opts.Now).WithMetrics(opts.Metrics)
	}
	return d
}

// Run fills the claim cache, initialises NVML (retrying while it is unavailable, with the
// NodeAccelerator saying so), starts the kubelet plugin with the helper's options (sockets,
// registrar) and serves until ctx ends: it sweeps orphans, republishes the pool and writes the
// NodeAccelerator status every Resync, after each prepare or unprepare and after each change
// to a claim of the pool (coalesced), and when a coalesced status write is due.
func (d *Driver) Run(ctx context.Context, helperOpts ...kubeletplugin.Option) error {
	log := d.opts.Log
	if err := d.startClaims(ctx); err != nil {
		return err
	}
	for {
		err := d.opts.Library.Init()
		if err == nil {
			break
		}
		d.opts.Metrics.NVMLError(err)
		log.Error(err, "NVML unavailable; retrying")
		d.mu.Lock()
		_, serr := d.writeStatus(ctx, engine.ClaimView{Emulated: d.opts.Emulated, DriverErr: err, NotServing: d.notServing})
		d.mu.Unlock()
		if serr != nil {
			log.Error(serr, "NodeAccelerator status")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(30 * time.Second):
		}
	}
	defer func() {
		if err := d.opts.Library.Shutdown(); err != nil {
			log.Error(err, "NVML shutdown")
		}
	}()
	d.gpuHealth.Initialized()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		d.gpuHealth.Watch(watchCtx, d.opts.Library, d.opts.Metrics, log.WithName("health"))
	}()
	defer func() { stopWatch(); <-watching }()
	opts := append([]kubeletplugin.Option{
		kubeletplugin.DriverName(migdra.DriverName),
		kubeletplugin.NodeName(d.opts.NodeName),
		kubeletplugin.KubeClient(d.opts.Client),
		kubeletplugin.HealthService(true),
	}, helperOpts...)
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		err = fmt.Errorf("start kubelet plugin: %w", err)
		d.mu.Lock()
		d.notServing = err
		d.mu.Unlock()
		if _, serr := d.sync(ctx); serr != nil {
			log.Error(serr, "sync")
		}
		return err
	}
	defer helper.Stop()
	d.mu.Lock()
	d.publisher, d.notServing = helper, nil
	d.mu.Unlock()
	log.Info("DRA plugin started", "driver", migdra.DriverName, "node", d.opts.NodeName)
	t := time.NewTicker(d.opts.Resync)
	defer t.Stop()
	// due is armed while a coalesced status write waits.
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		wait, err := d.sync(ctx)
		if err != nil {
			log.Error(err, "sync")
		}
		if wait > 0 {
			due.Reset(wait)
		} else {
			due.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.kick:
		case <-due.C:
		}
	}
}

// poke asks Run's loop for a sync (republish check) without blocking.
func (d *Driver) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Sync destroys the orphans whose grace has passed (never one in use: NVML refuses, and it
// is tried again next time), releases the records of claims no longer allocated whose pods
// are done (record.go; a record naming no pod after the same grace), republishes the pool
// when the rule in republish says so, and writes the NodeAccelerator status (a write the
// status writer coalesces waits for Run's next sync).
func (d *Driver) Sync(ctx context.Context) error {
	_, err := d.sync(ctx)
	return err
}

// sync is Sync; it returns how long a coalesced status write waits (0: none pending).
func (d *Driver) sync(ctx context.Context) (time.Duration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	claims, err := d.claims()
	if err != nil {
		return 0, err
	}
	pool := d.opts.NodeName
	conflict, bypass, labels, err := d.nodeFacts(ctx)
	if err != nil {
		return 0, err
	}
	obs, err := d.observe()
	if err != nil {
		err = fmt.Errorf("observe GPUs: %w", err)
		d.health.set(deviceHealth(nil, explained(claims, pool), pool, d.opts.Now(), healthTimeout))
		wait, serr := d.writeStatus(ctx, engine.ClaimView{Emulated: d.opts.Emulated, DriverErr: err, NotServing: d.notServing, Conflict: conflict, Bypass: bypass})
		return wait, errors.Join(err, serr)
	}
	held := explained(claims, pool)
	live := map[string]bool{}
	for _, c := range claims {
		if c.Status.Allocation != nil {
			live[string(c.UID)] = true
		}
	}
	recs, err := d.records()
	if err != nil {
		return 0, err
	}
	kept, released, errs := d.sweepRecords(ctx, obs, recs, live, conflict.Present())
	keys := orphans(obs, held, kept)
	for uid, r := range recs {
		if !live[uid] && len(r.Claim.Pods) == 0 && !released[uid] {
			keys = append(keys, "spec:"+uid)
		}
	}
	for _, k := range d.orphanSince.Pass(keys, d.opts.Now(), d.opts.OrphanGrace) {
		if uid, ok := cutSpec(k); ok {
			if conflict.Present() {
				errs = append(errs, d.opts.CDI.RemoveClaim(uid))
			} else {
				errs = append(errs, d.release(obs, recs, recs[uid]))
			}
			d.opts.Log.Info("CDI spec of a claim no longer allocated removed", "claim", uid)
			continue
		}
		if conflict.Present() {
			continue // another tool owns the node: its instances are not Slicer's to destroy
		}
		if err := d.destroyDevice(obs, k); err != nil {
			errs = append(errs, err)
			continue
		}
		d.orphanSince.Forget(k)
		d.opts.Metrics.OrphansReclaim.WithLabelValues("no_allocation").Inc()
		d.opts.Log.Info("orphan MIG instance destroyed", "device", k)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if len(keys) > 0 || len(released) > 0 {
		// Re-read what the sweep changed before deciding on the order.
		if obs, err = d.observe(); err != nil {
			return 0, fmt.Errorf("observe GPUs: %w", err)
		}
	}
	for uid := range released {
		delete(recs, uid)
	}
	modes := engine.ModePolicies(d.opts.GPUModes, obs, labels, d.opts.Log)
	switches, switched, merr := d.switchModes(obs, modeSteps(obs, modes, held, recs, conflict.Present()))
	hs := holders(claims, pool)
	for _, r := range recs {
		recordHolders(hs, obs, r)
	}
	recordMetrics(d.opts.Metrics, obs, hs, switches)
	d.health.set(deviceHealth(obs, held, pool, d.opts.Now(), healthTimeout))
	d.tellUnhealthy(obs, claims)
	perr := d.publish(ctx, obs, held, modes, conflict.Present())
	wait, serr := d.writeStatus(ctx, engine.ClaimView{Emulated: d.opts.Emulated, NotServing: d.notServing, Conflict: conflict, Bypass: bypass, Obs: obs, Claim: claimView(hs),
		ModePolicies: modes, ModeSwitches: switches, ModeSwitchesDone: switched})
	return wait, errors.Join(merr, perr, serr)
}

// observe reads the GPUs and marks what NVML's events made unhealthy.
func (d *Driver) observe() (*engine.Observation, error) {
	obs, err := engine.Observe(d.opts.Library, d.opts.Metrics)
	d.gpuHealth.Apply(obs)
	return obs, err
}

// writeStatus writes the NodeAccelerator status when the driver has a status writer.
func (d *Driver) writeStatus(ctx context.Context, v engine.ClaimView) (time.Duration, error) {
	if d.status == nil {
		return 0, nil
	}
	return d.status.Publish(ctx, v.NodeView())
}

func cutSpec(k string) (string, bool) { return strings.CutPrefix(k, "spec:") }

// sweepRecords goes through the node's records: each of a live claim is kept; each of a
// claim no longer allocated whose pods are not all done is kept, and one whose pods are done
// is released (record.go; while another tool owns the node only its spec is removed). It
// returns the device names the kept records hold (no orphans), the records released, and
// the errors met (a record whose pods cannot be read is kept).
func (d *Driver) sweepRecords(ctx context.Context, obs *engine.Observation, recs map[string]record, live map[string]bool, foreign bool) (map[string]bool, map[string]bool, []error) {
	kept, released := map[string]bool{}, map[string]bool{}
	var errs []error
	for _, uid := range slices.Sorted(maps.Keys(recs)) {
		r := recs[uid]
		if !live[uid] && len(r.Claim.Pods) > 0 {
			done, err := d.podsDone(ctx, r.Claim)
			switch {
			case err != nil:
				errs = append(errs, err)
			case done && foreign:
				errs = append(errs, d.opts.CDI.RemoveClaim(uid))
				released[uid] = true
				continue
			case done:
				if err := d.release(obs, recs, r); err != nil {
					errs = append(errs, err)
					break
				}
				released[uid] = true
				d.opts.Metrics.OrphansReclaim.WithLabelValues("pod_gone").Inc()
				d.opts.Log.Info("released a claim no longer allocated: its pods are done", "claim", claimRef(r.Claim.Namespace, r.Claim.Name, types.UID(uid)))
				continue
			}
		}
		for _, s := range recordedSlices(obs, r) {
			if name, ok := sliceDevice(obs.GPUByUUID(s.GPU), s); ok {
				kept[name] = true
			}
		}
	}
	return kept, released, errs
}

// destroyDevice destroys the observed instance at a device name.
func (d *Driver) destroyDevice(obs *engine.Observation, name string) error {
	for _, g := range obs.GPUs {
		for _, s := range g.Slices {
			if n, ok := sliceDevice(g, s); ok && n == name {
				if err := obs.DestroySlice(s, d.opts.Metrics); err != nil {
					return fmt.Errorf("destroy %s: %w", name, err)
				}
				return nil
			}
		}
	}
	return nil
}

// publish writes the pool if republish says so; before Run has started the helper it only
// remembers nothing (the first Sync publishes).
func (d *Driver) publish(ctx context.Context, obs *engine.Observation, held map[string][]string, modes map[string]migapi.ModePolicy, conflict bool) error {
	if d.publisher == nil {
		return nil
	}
	var gpus []migdra.GPU
	sick := unhealthy{}
	if !conflict { // another tool owns the node: an empty pool, so nothing is allocated here
		gpus, sick = poolGPUs(obs, held, modes), unhealthyOf(obs)
	}
	write, next := republish(d.last, gpus, sick)
	if !write {
		return nil
	}
	pool, err := migdra.Pool(gpus, mig.PreferredOrder)
	if err != nil {
		return fmt.Errorf("render pool: %w", err)
	}
	taint(&pool, sick)
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.opts.NodeName: pool}}
	if err := d.publisher.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish pool: %w", err)
	}
	d.last = &next
	d.opts.Log.V(1).Info("pool published", "slices", len(pool.Slices))
	return nil
}

// HandleError logs background errors (ResourceSlice publishing, gRPC). All are treated as
// recoverable: the publisher retries, and a restart would not fix a rejected slice.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.opts.Log.Error(err, msg, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus serves the kubelet's health stream from the last sync's report (health.go):
// the devices that allocated claims hold, each Healthy or Unhealthy as its GPU is, re-sent every
// healthResend and at once on a change; a report no sync refreshed within two resync periods
// is sent as Unknown.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return d.health.stream(ctx, reports, healthResend, 2*d.opts.Resync+healthResend, d.opts.Now)
}

// claimRef names a claim in logs.
func claimRef(ns, name string, uid types.UID) string {
	return ns + "/" + name + " (" + string(uid) + ")"
}
