package framework

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/agent"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/device-plugin/plugin"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

// RecordingAdvertiser remembers the devices the agent last advertised.
type RecordingAdvertiser struct {
	mu   sync.Mutex
	devs []plugin.Device
}

// SetDevices implements agent.Advertiser.
func (a *RecordingAdvertiser) SetDevices(devs []plugin.Device) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.devs = append([]plugin.Device(nil), devs...)
}

// IDs returns the advertised device IDs.
func (a *RecordingAdvertiser) IDs() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for _, d := range a.devs {
		out[d.ID] = d.Resource
	}
	return out
}

// Health returns whether each advertised device ID is reported healthy to the kubelet.
func (a *RecordingAdvertiser) Health() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for _, d := range a.devs {
		out[d.ID] = d.Healthy
	}
	return out
}

// KillSwitch cuts a component's way to the apiserver the moment it is killed: from then on
// none of its requests goes out, as none leaves a killed process. Tests that kill an agent at
// a crash point (emulated.Backend.CrashAfter) give it Config and set Dead then.
type KillSwitch struct{ Dead atomic.Bool }

// Config is cfg with every request failing once the switch is Dead.
func (k *KillSwitch) Config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return killable{rt: rt, k: k}
	}
	return out
}

type killable struct {
	rt http.RoundTripper
	k  *KillSwitch
}

func (t killable) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.k.Dead.Load() {
		return nil, errors.New("the process was killed")
	}
	return t.rt.RoundTrip(r)
}

// StaticUsage is a settable UsageSource (device ID → "namespace/name" of the pod).
type StaticUsage struct {
	mu  sync.Mutex
	use map[string]string
}

// Set replaces the usage.
func (u *StaticUsage) Set(use map[string]string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.use = use
}

// DeviceUsage implements agent.UsageSource.
func (u *StaticUsage) DeviceUsage(context.Context) (map[string]string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]string{}
	for k, v := range u.use {
		out[k] = v
	}
	return out, nil
}

// AgentOptions configure a test agent.
type AgentOptions struct {
	Node        string
	Library     nvml.Library
	CDIDir      string
	OrphanGrace time.Duration
	Usage       agent.UsageSource
	Advertiser  agent.Advertiser
	Metrics     *engine.Metrics
	Trigger     chan event.GenericEvent
	// PodGone lets the agent release allocations whose pod does not exist (agent.Options.Live);
	// tests whose allocations name no real pod leave it off.
	PodGone bool
	// Config, when set, is how the agent reaches the apiserver (a CountingProxy's); default
	// the Env's.
	Config *rest.Config
	// PublishInterval is agent.Options.PublishInterval.
	PublishInterval time.Duration
	// GPUModes is agent.Options.GPUModes.
	GPUModes []slicerv1alpha1.GPUModePolicy
}

// RunningAgent is an agent manager started against the test apiserver.
type RunningAgent struct {
	cancel context.CancelFunc
	done   chan error
}

// StartAgent starts the node agent's manager (no metrics or probe servers).
func (e *Env) StartAgent(opts AgentOptions, log logr.Logger) (*RunningAgent, error) {
	cfg := e.Config
	if opts.Config != nil {
		cfg = opts.Config
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: e.Scheme, Logger: log, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: agent.CacheOptions(opts.Node),
		// Tests start one agent per node in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("agent manager: %w", err)
	}
	var live client.Reader
	if opts.PodGone {
		live = mgr.GetAPIReader()
	}
	r := agent.New(mgr.GetClient(), mgr.GetEventRecorder(slicerv1alpha1.AgentName), agent.Options{
		NodeName: opts.Node, Library: opts.Library, Emulated: true, CDI: &cdi.Writer{Dir: opts.CDIDir},
		Usage: opts.Usage, Advertiser: opts.Advertiser, OrphanGrace: opts.OrphanGrace, Resync: 2 * time.Second, Metrics: opts.Metrics,
		Live: live, PublishInterval: opts.PublishInterval, GPUModes: opts.GPUModes,
	})
	var trigger <-chan event.GenericEvent
	if opts.Trigger != nil {
		trigger = opts.Trigger
	}
	if err := r.SetupWithManager(mgr, trigger); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &RunningAgent{cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- mgr.Start(ctx) }()
	return ra, nil
}

// Stop stops the agent and waits for it.
func (a *RunningAgent) Stop() error {
	a.cancel()
	if err := <-a.done; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("agent manager: %w", err)
	}
	return nil
}

// NodeConditionStatus returns the status of a NodeAccelerator condition ("" if absent).
func NodeConditionStatus(na *slicerv1alpha1.NodeAccelerator, t string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(na.Status.Conditions, t); c != nil {
		return c.Status
	}
	return ""
}

// DeviceInstance is one MIG instance as an NVML emulator or hardware reports it.
type DeviceInstance struct {
	GPUUUID   string
	Profile   string
	Placement mig.Placement
	MIGUUID   string
}

// CheckAgentInvariants checks I1–I4 for one node: live allocations hold
// distinct, non-overlapping slots (I1); every Ready allocation's device exists
// on the device at its actual slot, and every device instance is held by an
// allocation or listed in allowedExtra (I1, I2); each GPU's instances form a
// legal state (I3); the advertised devices are exactly the Ready allocations'
// (I4); CDI specs exist exactly for the Ready devices (I2). A whole-GPU allocation holds its
// whole GPU: it overlaps any other allocation there (I15), and a Ready one's GPU has no MIG
// instance (I16: never a device in the wrong mode); its device ID is the GPU's UUID. The
// kubelet and CDI know a device by its slot's device ID (mig.Slot.DeviceID, DeviceIDOf), not
// its MIG UUID; allowedExtra lists MIG UUIDs, and set specs (cdi.IsSet) are the device plugin's.
func CheckAgentInvariants(allocs []slicerv1alpha1.SliceAllocation, devs []DeviceInstance, models map[string]mig.Model,
	advertised map[string]string, cdiDevices []string, allowedExtra map[string]bool,
) error {
	var errs []error
	type slot struct {
		gpu         string
		start, size int32
	}
	held := map[slot]string{}
	byUUID := map[string]DeviceInstance{}
	for _, d := range devs {
		if d.MIGUUID != "" {
			byUUID[d.MIGUUID] = d
		}
	}
	ready := map[string]bool{}   // MIG UUIDs of Ready allocations
	readyID := map[string]bool{} // their device IDs
	for _, a := range allocs {
		if a.DeletionTimestamp != nil || a.Status.State == slicerv1alpha1.AllocationFailed {
			continue
		}
		pl := migapi.APIPlacement(migapi.SlotAsWritten(&a.Spec).Placement)
		if a.Status.ActualPlacement != nil {
			pl = *a.Status.ActualPlacement
		}
		gpu := a.Spec.GPUUUID
		if a.Status.ActualGPUUUID != "" {
			gpu = a.Status.ActualGPUUUID
		}
		s := slot{gpu, pl.Start, pl.Size}
		if a.Spec.WholeGPU {
			s = slot{gpu, 0, math.MaxInt16} // the whole GPU
		}
		for o, holder := range held {
			if o.gpu == s.gpu && o.start < s.start+s.size && s.start < o.start+o.size {
				errs = append(errs, fmt.Errorf("I1: %s/%s and %s overlap on %s", a.Namespace, a.Name, holder, s.gpu))
			}
		}
		held[s] = a.Namespace + "/" + a.Name
		if a.Spec.WholeGPU && a.Status.State == slicerv1alpha1.AllocationReady {
			for _, d := range devs {
				if d.GPUUUID == gpu {
					errs = append(errs, fmt.Errorf("I16: %s/%s holds %s whole, which has MIG instance %s@%d (%q)", a.Namespace, a.Name, gpu, d.Profile, d.Placement.Start, d.MIGUUID))
				}
			}
			readyID[DeviceIDOf(&a)] = true
			continue
		}
		if a.Status.State == slicerv1alpha1.AllocationReady {
			d, ok := byUUID[a.Status.MIGDeviceUUID]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("I1: %s/%s is Ready with %s, which does not exist", a.Namespace, a.Name, a.Status.MIGDeviceUUID))
			case d.GPUUUID != gpu || d.Placement.Start != int(pl.Start) || d.Placement.Size != int(pl.Size):
				errs = append(errs, fmt.Errorf("I1: %s/%s says %s %d:%d, device %s is on %s at %s", a.Namespace, a.Name, gpu, pl.Start, pl.Size, d.MIGUUID, d.GPUUUID, d.Placement))
			}
			ready[a.Status.MIGDeviceUUID] = true
			readyID[DeviceIDOf(&a)] = true
		}
	}
	wanted := map[string]bool{}
	for _, a := range allocs {
		if a.Status.MIGDeviceUUID != "" {
			wanted[a.Status.MIGDeviceUUID] = true
		}
	}
	perGPU := map[string][]mig.Instance{}
	for _, d := range devs {
		perGPU[d.GPUUUID] = append(perGPU[d.GPUUUID], mig.Instance{Profile: d.Profile, Placement: d.Placement})
		if d.MIGUUID == "" || (!wanted[d.MIGUUID] && !allowedExtra[d.MIGUUID]) {
			errs = append(errs, fmt.Errorf("I2: instance %s %s@%d (%q) is held by no allocation", d.GPUUUID, d.Profile, d.Placement.Start, d.MIGUUID))
		}
	}
	for g, insts := range perGPU {
		if _, err := mig.NewGPUState(models[g], insts); err != nil {
			errs = append(errs, fmt.Errorf("I3: GPU %s: %w", g, err))
		}
	}
	extraID := map[string]bool{}
	for _, d := range devs {
		if d.MIGUUID != "" && allowedExtra[d.MIGUUID] {
			extraID[mig.Slot{GPU: d.GPUUUID, Profile: d.Profile, Placement: d.Placement}.DeviceID()] = true
		}
	}
	if advertised != nil {
		for id := range advertised {
			if !readyID[id] {
				errs = append(errs, fmt.Errorf("I4: %s advertised but no allocation is Ready with it", id))
			}
		}
		for id := range readyID {
			if _, ok := advertised[id]; !ok {
				errs = append(errs, fmt.Errorf("I4: %s is Ready but not advertised", id))
			}
		}
	}
	if cdiDevices != nil {
		have := map[string]bool{}
		for _, d := range cdiDevices {
			if cdi.IsSet(d) {
				continue
			}
			have[d] = true
			if !readyID[d] && !extraID[d] && !allowedExtra[d] {
				errs = append(errs, fmt.Errorf("I2: CDI spec for %s, which no Ready allocation holds", d))
			}
		}
		for id := range readyID {
			if !have[id] {
				errs = append(errs, fmt.Errorf("I2: no CDI spec for Ready device %s", id))
			}
		}
	}
	return errors.Join(errs...)
}

// DeviceIDOf is the device ID (mig.Slot.DeviceID) of the slot where an allocation's slice is:
// its actual GPU and placement when the status has them; of a whole-GPU allocation, its GPU's.
func DeviceIDOf(a *slicerv1alpha1.SliceAllocation) string {
	s := migapi.SlotAsWritten(&a.Spec)
	if a.Status.ActualGPUUUID != "" {
		s.GPU = a.Status.ActualGPUUUID
	}
	if p := a.Status.ActualPlacement; p != nil {
		s.Placement = mig.Placement{Start: int(p.Start), Size: int(p.Size)}
	}
	return s.DeviceID()
}

// ListAllocations lists a node's SliceAllocations.
func ListAllocations(ctx context.Context, c client.Client, node string) ([]slicerv1alpha1.SliceAllocation, error) {
	var l slicerv1alpha1.SliceAllocationList
	if err := c.List(ctx, &l, client.MatchingLabels{slicerv1alpha1.LabelNode: node}); err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	return l.Items, nil
}
