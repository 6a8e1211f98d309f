package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
)

// GPU health from NVML events, for both frontends. A GPU is unhealthy while
//   - an NVML call on it fails (Observe: GPU.Err), or
//   - the driver asks for a recovery action (a GPU reset, a reboot: nvml.Device.RecoveryAction,
//     read by each observation, so a restarted agent sees it too), or
//   - an XID that means the GPU is broken (ClassifyXID), or the GPU becoming unavailable,
//     reached this agent's event set, and the driver has not been seen to ask for a recovery
//     action and then stop asking since (the reset that recovers it). A driver without the
//     recovery-action field keeps such a GPU unhealthy until the agent restarts, as NVIDIA's
//     device plugin does.
// A MIG instance is unhealthy after an XID the driver confined to it, until it is destroyed
// (its MIG device UUID is then gone, and a new instance has another). An application's XID
// is counted and changes nothing. Health marks GPUs and slices of an observation (Apply);
// the frontends report them (ListAndWatch, DRA device taints and health stream, the
// NodeAccelerator) and place nothing new there.

// Health holds what the events said; Watch fills it, Apply reads it into an observation.
type Health struct {
	mu sync.Mutex
	// gpus marks GPUs (by UUID) made unhealthy by an event.
	gpus map[string]*gpuMark
	// instances marks MIG devices (by UUID) made unhealthy by an XID in their instance.
	instances map[string]instanceMark
	changed   func()
	// ready is closed once the frontend has initialised NVML (Initialized): the real
	// library must not be called before (go-nvml's calls crash the process when
	// libnvidia-ml was never loaded).
	ready     chan struct{}
	readyOnce sync.Once
}

type instanceMark struct {
	gpu, reason string
}

type gpuMark struct {
	reason string
	// askedForAction: the driver asked for a recovery action since the mark.
	askedForAction bool
	// registration: the GPU's events could not be registered; a registration that works
	// clears it.
	registration bool
}

// NewHealth returns an empty book; changed (may be nil) is called, without blocking, when an
// event changed what it holds.
func NewHealth(changed func()) *Health {
	if changed == nil {
		changed = func() {}
	}
	return &Health{gpus: map[string]*gpuMark{}, instances: map[string]instanceMark{}, changed: changed, ready: make(chan struct{})}
}

// Initialized tells Watch that the frontend has initialised NVML: it starts calling it.
func (h *Health) Initialized() { h.readyOnce.Do(func() { close(h.ready) }) }

// Apply marks obs's GPUs and slices unhealthy as the events and the observed recovery
// actions say, and forgets the instance marks of MIG devices gone from fully observed GPUs.
func (h *Health) Apply(obs *Observation) {
	if h == nil || obs == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range obs.GPUs {
		mark := h.gpus[g.UUID]
		switch {
		case g.Recovery != nvml.RecoveryNone:
			if mark != nil {
				mark.askedForAction = true
			}
			g.markUnhealthy(fmt.Sprintf("the driver asks for a %s", g.Recovery))
		case mark != nil && mark.askedForAction:
			delete(h.gpus, g.UUID) // the driver asked for an action and no longer does: recovered
		case mark != nil:
			g.markUnhealthy(mark.reason)
		}
		if g.Err != nil {
			continue
		}
		live := map[string]bool{}
		for i := range g.Slices {
			s := &g.Slices[i]
			live[s.MIGUUID] = true
			if mark, ok := h.instances[s.MIGUUID]; ok && s.MIGUUID != "" {
				s.Unhealthy = mark.reason
			}
		}
		for u, mark := range h.instances {
			if mark.gpu == g.UUID && !live[u] {
				delete(h.instances, u)
			}
		}
	}
}

// handle records one event of GPU dev (uuid, NVML index i) and reports whether health changed.
func (h *Health) handle(ev nvml.Event, dev nvml.Device, uuid string, i int, m *Metrics, log logr.Logger) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Type {
	case nvml.EventXidCriticalError:
		scope := ClassifyXID(ev)
		m.XIDs.WithLabelValues(gpuLabel(i), xidLabel(ev.Data), string(scope)).Inc()
		m.XIDLast.WithLabelValues(gpuLabel(i), xidLabel(ev.Data), string(scope)).SetToCurrentTime()
		log.Info("XID", "gpu", i, "uuid", uuid, "xid", ev.Data, "scope", scope, "gpuInstance", ev.GPUInstanceID, "computeInstance", ev.ComputeInstanceID)
		switch scope {
		case XIDApplication:
			return false
		case XIDInstance:
			mig := migDeviceAt(dev, ev.GPUInstanceID, ev.ComputeInstanceID)
			if mig == "" {
				return false // the instance is gone already
			}
			h.instances[mig] = instanceMark{gpu: uuid, reason: xidReason(ev.Data, fmt.Sprintf("in GPU instance %d", ev.GPUInstanceID))}
			return true
		}
		h.markGPU(uuid, xidReason(ev.Data, fmt.Sprintf("on GPU %d", i)))
		return true
	case nvml.EventGPUUnavailable:
		log.Info("GPU unavailable", "gpu", i, "uuid", uuid)
		h.markGPU(uuid, fmt.Sprintf("GPU %d became unavailable (NVML event)", i))
		return true
	case nvml.EventGPURecoveryAction:
		mark := h.gpus[uuid]
		action := nvml.RecoveryAction(ev.Data)
		log.Info("GPU recovery action", "gpu", i, "uuid", uuid, "action", action.String())
		switch {
		case mark == nil:
			return false // Apply reads the action itself
		case action != nvml.RecoveryNone:
			mark.askedForAction = true
		case mark.askedForAction:
			delete(h.gpus, uuid)
		}
		return true
	}
	return false
}

func (h *Health) markGPU(uuid, reason string) {
	if m := h.gpus[uuid]; m != nil {
		m.reason, m.registration = reason, false
		return
	}
	h.gpus[uuid] = &gpuMark{reason: reason}
}

// migDeviceAt is the UUID of GPU dev's MIG device with those instance ids ("" if none).
func migDeviceAt(dev nvml.Device, gi, ci uint32) string {
	devs, err := dev.MIGDevices()
	if err != nil {
		return ""
	}
	for _, d := range devs {
		if uint32(d.GPUInstanceID) == gi && uint32(d.ComputeInstanceID) == ci {
			return d.UUID
		}
	}
	return ""
}

// The watcher's timings: how long one Wait blocks (so the watcher notices its context), and
// the backoff before a new event set after NVML failed.
const (
	eventWait        = time.Second
	watchBackoffMin  = time.Second
	watchBackoffMax  = 30 * time.Second
	watchDriverPoll  = 500 * time.Millisecond
	watchRegisterAll = nvml.EventXidCriticalError | nvml.EventGPUUnavailable | nvml.EventGPURecoveryAction
)

// Watch subscribes every GPU of lib to the XID, GPU-unavailable and recovery-action events and
// records them until ctx ends. It calls lib only once the frontend says it initialised it
// (Initialized); whenever NVML fails it starts over with a new event set after a backoff. A GPU whose events
// cannot be registered is marked unhealthy (NVIDIA's device plugin does the same), one whose
// driver supports none of them is not watched.
func (h *Health) Watch(ctx context.Context, lib nvml.Library, m *Metrics, log logr.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-h.ready:
	}
	backoff := watchBackoffMin
	for ctx.Err() == nil {
		complete, err := h.watchOnce(ctx, lib, m, log, backoff)
		if ctx.Err() != nil {
			return
		}
		if complete {
			// Every GPU was subscribed: what failed since is a new failure, not the next
			// of a series.
			backoff = watchBackoffMin
		}
		if err != nil && nvml.IsDriverUnavailable(err) {
			// NVML is not initialised yet (the frontend does it) or the driver is away: look
			// again soon, without growing the wait.
			select {
			case <-ctx.Done():
				return
			case <-time.After(watchDriverPoll):
			}
			continue
		}
		if err != nil {
			m.NVMLError(err)
			log.Error(err, "NVML events; starting over", "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// watchOnce registers every GPU on a new event set and records its events until an NVML
// call fails, ctx ends, or, when a GPU could not be registered, retry has passed (complete
// says whether every GPU was registered and events were waited for).
func (h *Health) watchOnce(ctx context.Context, lib nvml.Library, m *Metrics, log logr.Logger, retry time.Duration) (complete bool, err error) {
	set, err := lib.EventSetCreate()
	if err != nil {
		return false, fmt.Errorf("create event set: %w", err)
	}
	defer func() {
		if err := set.Free(); err != nil {
			log.Error(err, "free NVML event set")
		}
	}()
	n, err := lib.DeviceCount()
	if err != nil {
		return false, fmt.Errorf("device count: %w", err)
	}
	type watched struct {
		dev   nvml.Device
		index int
	}
	byUUID := map[string]watched{}
	var retryAt time.Time
	for i := range n {
		dev, err := lib.Device(i)
		if err != nil {
			return false, fmt.Errorf("device %d: %w", i, err)
		}
		uuid, err := dev.UUID()
		if err != nil {
			return false, fmt.Errorf("device %d uuid: %w", i, err)
		}
		if err := register(dev, set); err != nil {
			m.NVMLError(err)
			h.mu.Lock()
			if h.gpus[uuid] == nil {
				h.gpus[uuid] = &gpuMark{reason: fmt.Sprintf("GPU %d: its NVML events cannot be registered: %v", i, err), registration: true}
			}
			h.mu.Unlock()
			h.changed()
			retryAt = time.Now().Add(retry)
			continue
		}
		h.mu.Lock()
		cleared := h.gpus[uuid] != nil && h.gpus[uuid].registration
		if cleared {
			delete(h.gpus, uuid)
		}
		h.mu.Unlock()
		if cleared {
			h.changed()
		}
		byUUID[uuid] = watched{dev: dev, index: i}
	}
	log.V(1).Info("watching NVML events", "gpus", len(byUUID), "of", n)
	for ctx.Err() == nil {
		if !retryAt.IsZero() && time.Now().After(retryAt) {
			return false, nil
		}
		ev, err := set.Wait(min(eventWait, retry))
		if nvml.IsTimeout(err) {
			continue
		}
		if err != nil {
			return retryAt.IsZero(), fmt.Errorf("wait for NVML events: %w", err)
		}
		if ev.Device == nil {
			continue
		}
		uuid, err := ev.Device.UUID()
		if err != nil {
			m.NVMLError(err)
			log.Error(err, "NVML event of a GPU whose UUID cannot be read", "type", ev.Type, "data", ev.Data)
			continue
		}
		w, ok := byUUID[uuid]
		if !ok {
			continue
		}
		if h.handle(ev, w.dev, uuid, w.index, m, log) {
			h.changed()
		}
	}
	return retryAt.IsZero(), nil
}

// register subscribes dev to the events the watcher reads that its driver supports; a driver
// that supports none is not an error (nothing to watch).
func register(dev nvml.Device, set nvml.EventSet) error {
	supported, err := dev.SupportedEventTypes()
	if nvml.ReturnOf(err) == nvml.ErrorNotSupported {
		return nil
	}
	if err != nil {
		return fmt.Errorf("supported event types: %w", err)
	}
	mask := supported & watchRegisterAll
	if mask == 0 {
		return nil
	}
	if err := dev.RegisterEvents(mask, set); nvml.ReturnOf(err) != nvml.ErrorNotSupported && err != nil {
		return fmt.Errorf("register events: %w", err)
	}
	return nil
}

// Told remembers, per holder (an allocation's or a claim's UID), the unhealthy reason its pods
// were last told, so each is told once per reason; both frontends keep one. The zero value is
// not usable: make it.
type Told map[types.UID]string

// Pass records this pass's reasons (why by holder, "" for healthy) and returns the holders
// to tell now: those whose reason is new. Holders not in why are forgotten.
func (t Told) Pass(why map[types.UID]string) []types.UID {
	var out []types.UID
	for uid := range t {
		if why[uid] == "" {
			delete(t, uid)
		}
	}
	for uid, w := range why {
		if w != "" && t[uid] != w {
			t[uid] = w
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// TellPod records a GPUUnhealthy Warning Event on a pod (namespace, name, UID); nothing
// without a recorder.
func TellPod(rec events.EventRecorder, namespace, name string, uid types.UID, format string, args ...any) {
	if rec == nil {
		return
	}
	pod := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: uid}
	rec.Eventf(pod, nil, corev1.EventTypeWarning, slicerv1alpha1.ReasonGPUUnhealthy, "Reconcile", format, args...)
}
