// Package dra is Slicer's kubelet DRA plugin (driver migdra.DriverName): it publishes the
// node's pool of MIG devices (internal/mig/migdra) and, when the kubelet prepares a
// ResourceClaim, creates the GPU instance and compute instance at exactly the placement the
// allocated device names, through the agent's NVML realizer, and writes the claim's CDI spec.
// State rules: see state.go; design: docs/design/dra.md.
package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// Options configure a Driver.
type Options struct {
	// NodeName is this node; it is also the pool's name.
	NodeName string
	Library  nvml.Library
	Client   kubernetes.Interface
	CDI      *cdi.Writer
	Metrics  *agent.Metrics
	// OrphanGrace is how long an instance no allocated claim explains is kept.
	OrphanGrace time.Duration
	// Resync is how often orphans are swept and the pool checked (default one minute).
	Resync time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	Log logr.Logger
}

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	opts Options
	// mu serializes NVML mutations, the orphan clock and the published order.
	mu          sync.Mutex
	orphanSince map[string]time.Time
	last        *published
	publisher   interface {
		PublishResources(context.Context, resourceslice.DriverResources) error
	}
	kick chan struct{}
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
	return &Driver{opts: opts, orphanSince: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// Run initialises NVML (retrying while it is unavailable), starts the kubelet plugin with
// the helper's options (sockets, registrar) and serves until ctx ends: it sweeps orphans and
// republishes the pool every Resync and after each prepare or unprepare (coalesced).
func (d *Driver) Run(ctx context.Context, helperOpts ...kubeletplugin.Option) error {
	log := d.opts.Log
	for {
		err := d.opts.Library.Init()
		if err == nil {
			break
		}
		d.opts.Metrics.NVMLErrors.WithLabelValues(nvml.ReturnOf(err).String()).Inc()
		log.Error(err, "NVML unavailable; retrying")
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
	opts := append([]kubeletplugin.Option{
		kubeletplugin.DriverName(migdra.DriverName),
		kubeletplugin.NodeName(d.opts.NodeName),
		kubeletplugin.KubeClient(d.opts.Client),
		kubeletplugin.HealthService(false),
	}, helperOpts...)
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	d.mu.Lock()
	d.publisher = helper
	d.mu.Unlock()
	log.Info("DRA plugin started", "driver", migdra.DriverName, "node", d.opts.NodeName)
	t := time.NewTicker(d.opts.Resync)
	defer t.Stop()
	for {
		if err := d.Sync(ctx); err != nil {
			log.Error(err, "sync")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.kick:
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

// claims lists the allocated claims of the cluster (their allocation is the API's half of
// the state; see state.go).
func (d *Driver) claims(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
	l, err := d.opts.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	return l.Items, nil
}

// Sync destroys the orphans whose grace has passed (never one in use: NVML refuses, and it
// is tried again next time), removes the CDI specs of claims no longer allocated after the
// same grace, and republishes the pool when the rule in republish says so.
func (d *Driver) Sync(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	claims, err := d.claims(ctx)
	if err != nil {
		return err
	}
	obs, err := agent.ObserveGPUs(d.opts.Library, d.opts.Metrics)
	if err != nil {
		return fmt.Errorf("observe GPUs: %w", err)
	}
	pool := d.opts.NodeName
	held := explained(claims, pool)
	keys := orphans(obs, held)
	live := map[string]bool{}
	for i := range claims {
		if claims[i].Status.Allocation != nil {
			live[string(claims[i].UID)] = true
		}
	}
	specs, err := d.opts.CDI.ListClaims()
	if err != nil {
		return err
	}
	for _, uid := range specs {
		if !live[uid] {
			keys = append(keys, "spec:"+uid)
		}
	}
	var errs []error
	for _, k := range due(keys, d.orphanSince, d.opts.Now(), d.opts.OrphanGrace) {
		if uid, ok := cutSpec(k); ok {
			errs = append(errs, d.opts.CDI.RemoveClaim(uid))
			d.opts.Log.Info("CDI spec of a claim no longer allocated removed", "claim", uid)
			continue
		}
		if err := d.destroyDevice(obs, k); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.orphanSince, k)
		d.opts.Metrics.OrphansReclaim.WithLabelValues("no_allocation").Inc()
		d.opts.Log.Info("orphan MIG instance destroyed", "device", k)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(keys) > 0 {
		// Re-read what the sweep changed before deciding on the order.
		if obs, err = agent.ObserveGPUs(d.opts.Library, d.opts.Metrics); err != nil {
			return fmt.Errorf("observe GPUs: %w", err)
		}
	}
	recordMetrics(d.opts.Metrics, obs, holders(claims, pool))
	return d.publish(ctx, obs, held)
}

func cutSpec(k string) (string, bool) { return strings.CutPrefix(k, "spec:") }

// destroyDevice destroys the observed instance at a device name.
func (d *Driver) destroyDevice(obs *agent.Observation, name string) error {
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
func (d *Driver) publish(ctx context.Context, obs *agent.Observation, held map[string][]string) error {
	if d.publisher == nil {
		return nil
	}
	gpus := poolGPUs(obs, held)
	write, next := republish(d.last, gpus)
	if !write {
		return nil
	}
	pool, err := migdra.Pool(gpus, mig.PreferredOrder)
	if err != nil {
		return fmt.Errorf("render pool: %w", err)
	}
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

// WatchHealthStatus is not served (HealthService(false)): an unhealthy GPU leaves the pool.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// claimRef names a claim in logs.
func claimRef(ns, name string, uid types.UID) string {
	return ns + "/" + name + " (" + string(uid) + ")"
}
