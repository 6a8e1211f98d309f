// Package plugin is Slicer's kube-scheduler plugin (SlicerMIG): it places the
// MIG slices a pod asks for (slicer.dev/mig-<profile>) on a node's GPUs. One
// file per extension point; Filter and Score read the snapshot only,
// Reserve/Unreserve change memory, PreBind is the one durable write.
package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/scheduler/config"
	"github.com/slicer-operator/slicer/scheduler/snapshot"
)

// Name is the plugin's name in the scheduler configuration.
const Name = config.PluginName

// Hooks let tests stop the plugin at chosen points (e.g. to kill the
// scheduler between Reserve and PreBind). An error a hook returns fails the
// extension point as any other error would.
type Hooks struct {
	// AfterReserve runs once the reservation is held in memory.
	AfterReserve func(ctx context.Context, pod *corev1.Pod) error
	// AfterPreBind runs once the allocations exist and are Ready, before Bind.
	AfterPreBind func(ctx context.Context, pod *corev1.Pod) error
	// BeforeSnapshotEvent runs on the snapshot's informer goroutine before
	// the snapshot applies an event (snapshot.FeedOptions.BeforeEvent):
	// blocking it makes the snapshot lag the scheduler's own informers.
	BeforeSnapshotEvent func(obj client.Object, deleted bool)
	// Rejected runs when the plugin turns a MIG pod away for want of room.
	Rejected func(pod *corev1.Pod)
}

// Options are what the binary and the tests inject into the plugin.
type Options struct {
	// Client for the allocation writes; nil builds one from the scheduler's kubeconfig.
	Client client.Client
	// Registerer for the plugin's metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Hooks for tests.
	Hooks Hooks
	// OnStart, when set, receives the plugin once built (tests read its cache).
	OnStart func(*Plugin)
	// DefragReplacementTimeout is how long a moved pod's destination is held for its
	// replacement (Evict mode); zero means DefaultDefragReplacementTimeout.
	DefragReplacementTimeout time.Duration
}

// Plugin implements the SlicerMIG extension points.
type Plugin struct {
	handle  fwk.Handle
	client  client.Client
	pods    corelisters.PodLister
	cache   *snapshot.Cache
	metrics *Metrics
	hooks   Hooks
	timeout time.Duration
	log     logr.Logger

	mu sync.Mutex
	// prebindFailed marks pods whose PreBind failed, so Unreserve can say why.
	prebindFailed map[types.UID]bool
	// rejected are MIG pods that found no room, activated when room appears.
	rejected map[types.UID]*corev1.Pod
	// held are the rooms held for nominated pods (nominations.go), shared by preemption and
	// defragmentation.
	held *nominations
	// preemptor is Slicer's preemption (preempt.go); nil in unit tests that run none.
	preemptor *preemptor
	// defrag is defragmentation (defrag.go); now is the clock of the rooms held for plans
	// (nil: time.Now).
	defrag *defragmenter
	now    func() time.Time
}

var (
	_ fwk.PreFilterPlugin     = &Plugin{}
	_ fwk.PreFilterExtensions = &Plugin{}
	_ fwk.FilterPlugin        = &Plugin{}
	_ fwk.PostFilterPlugin    = &Plugin{}
	_ fwk.ScorePlugin         = &Plugin{}
	_ fwk.PreScorePlugin      = &Plugin{}
	_ fwk.ReservePlugin       = &Plugin{}
	_ fwk.PreBindPlugin       = &Plugin{}
	_ fwk.PostBindPlugin      = &Plugin{}
	_ fwk.EnqueueExtensions   = &Plugin{}
)

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// Cache is the plugin's snapshot cache (for tests and diagnostics).
func (p *Plugin) Cache() *snapshot.Cache { return p.cache }

// Metrics are the plugin's collectors.
func (p *Plugin) Metrics() *Metrics { return p.metrics }

// NewScheme returns the scheme the plugin's client and informers use.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(slicerv1alpha1.AddToScheme(s))
	return s
}

// New is the plugin factory the binary registers with default options.
func New(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return NewFactory(Options{})(ctx, args, h)
}

// NewFactory returns a plugin factory with injected options.
func NewFactory(opts Options) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		var args config.PluginArgs
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return nil, fmt.Errorf("decode %s args: %w", Name, err)
		}
		timeout := args.SliceReadyTimeout.Duration
		if timeout <= 0 {
			timeout = config.DefaultSliceReadyTimeout
		}
		log := klog.FromContext(ctx).WithName(Name)
		defrag, err := newDefragPolicy(args.Defragmentation)
		if err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
		m, err := NewMetrics(opts.Registerer)
		if err != nil {
			return nil, err
		}
		scheme := NewScheme()
		// Slicer's kinds have no protobuf encoding; the scheduler's config asks for it.
		cfg := rest.CopyConfig(h.KubeConfig())
		cfg.ContentType, cfg.AcceptContentTypes = "application/json", ""
		c := opts.Client
		if c == nil {
			if c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
				return nil, fmt.Errorf("allocation client: %w", err)
			}
		}
		p := &Plugin{
			handle: h, client: c, metrics: m, hooks: opts.Hooks, timeout: timeout, log: log,
			pods:          h.SharedInformerFactory().Core().V1().Pods().Lister(),
			cache:         snapshot.New(log, m),
			prebindFailed: map[types.UID]bool{},
			rejected:      map[types.UID]*corev1.Pod{},
			held:          newNominations(),
			now:           time.Now,
		}
		if p.defrag, err = newDefragmenter(h, defrag, p.cache, p.held, m, log, opts.DefragReplacementTimeout); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		p.preemptor = newPreemptor(h, p.cache, p.held)
		if _, err := h.SharedInformerFactory().Core().V1().Pods().Informer().AddEventHandler(
			toolscache.ResourceEventHandlerFuncs{DeleteFunc: p.forgetDeletedPod}); err != nil {
			return nil, fmt.Errorf("%s: watch pod deletions: %w", Name, err)
		}
		// Room freed in the snapshot (an allocation or reservation gone, a
		// NodeAccelerator changed) retries the pods it turned away.
		p.cache.OnFreed(func() { p.activateRejected(log) })
		if _, err := snapshot.Feed(ctx, cfg, scheme, p.cache, snapshot.FeedOptions{BeforeEvent: opts.Hooks.BeforeSnapshotEvent}); err != nil {
			return nil, err
		}
		log.Info("snapshot rebuilt from the API", "nodes", len(p.cache.Nodes()), "sliceReadyTimeout", timeout,
			"defragmentation", defrag.mode)
		if opts.OnStart != nil {
			opts.OnStart(p)
		}
		return p, nil
	}
}

// clock is the plugin's time (Plugin.now, time.Now when unset).
func (p *Plugin) clock() time.Time {
	if p.now == nil {
		return time.Now()
	}
	return p.now()
}
