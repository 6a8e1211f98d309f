package dra

import (
	"context"
	"sort"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	"github.com/slicer-operator/slicer/internal/mig/migdra"
)

// The kubelet's health stream (kubeletplugin.DRAPlugin.WatchHealthStatus) shows each prepared
// device's health in the pod's status (containerStatuses[].allocatedResourcesStatus). Health
// is what the last sync observed through NVML, kept in memory and re-sent from there: the
// kubelet is answered without touching NVML, and a stream never waits for the driver's lock.

// healthResend is how often the stream repeats the last report when nothing changed; the
// kubelet treats a device as Unknown when it is not refreshed within healthTimeout.
const (
	healthResend  = 10 * time.Second
	healthTimeout = 30 * time.Second
)

// deviceHealth is the health of every device of pool that an allocated claim holds, as the
// observation shows it (pure): a device is Healthy when its GPU is there, healthy, in MIG
// mode and of a model Slicer knows; otherwise Unhealthy, with the reason; Unknown when there
// is no observation (NVML unavailable). Sorted by name.
func deviceHealth(obs *engine.Observation, held map[string][]string, pool string, at time.Time, timeout time.Duration) []kubeletplugin.DeviceHealth {
	out := make([]kubeletplugin.DeviceHealth, 0, len(held))
	for name := range held {
		h := kubeletplugin.DeviceHealth{PoolName: pool, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy, LastUpdated: at, HealthCheckTimeout: timeout}
		gpu, err := migdra.DeviceGPU(name)
		if obs == nil {
			h.Health, h.Message = kubeletplugin.HealthStatusUnknown, "the GPUs cannot be observed: NVML is unavailable"
		} else if err != nil {
			h.Health, h.Message = kubeletplugin.HealthStatusUnknown, err.Error()
		} else if why := deviceUnhealthy(obs, gpu, name); why != "" {
			h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, why
		}
		out = append(out, h)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].DeviceName < out[b].DeviceName })
	return out
}

// deviceUnhealthy says why device name on GPU index i is unhealthy ("" when it is not): its
// GPU cannot serve MIG devices (GPU.Unusable: unhealthy, not in MIG mode, not a model Slicer
// knows, not there), or an XID broke its instance; for a whole GPU, the GPU cannot serve
// whole (wholeUnusable).
func deviceUnhealthy(obs *engine.Observation, i int, name string) string {
	g := gpuByIndex(obs, i)
	if _, whole := migdra.ParseWholeDeviceName(name); whole {
		return wholeUnusable(g)
	}
	if why := g.Unusable(); why != "" {
		return why
	}
	for _, s := range g.Slices {
		if n, ok := sliceDevice(g, s); ok && n == name && s.Unhealthy != "" {
			return s.Unhealthy
		}
	}
	return ""
}

// tellUnhealthy records a Warning Event on the pods of each allocated claim of this pool one
// of whose devices turned unhealthy (once per claim and reason, engine.Told: an XID, the GPU's
// health; a GPU that could not be observed on this pass is not told), and forgets claims
// healthy again or gone. Called with d.mu held.
func (d *Driver) tellUnhealthy(obs *engine.Observation, claims []*resourceapi.ResourceClaim) {
	why := map[types.UID]string{}
	byUID := map[types.UID]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		devs, err := claimDevices(c, d.opts.NodeName)
		if err != nil || len(devs) == 0 {
			continue
		}
		byUID[c.UID] = c
		why[c.UID] = ""
		for _, a := range devs {
			if g := gpuByIndex(obs, a.GPU); g != nil && g.Err != nil {
				continue
			}
			if w := deviceUnhealthy(obs, a.GPU, a.Device); w != "" {
				why[c.UID] = "device " + a.Device + ": " + w
				break
			}
		}
	}
	for _, uid := range d.told.Pass(why) {
		c := byUID[uid]
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" && ref.APIGroup == "" {
				engine.TellPod(d.opts.Events, c.Namespace, ref.Name, ref.UID, "claim %s: %s; the kubelet is told, and no new claim is allocated it", c.Name, why[uid])
			}
		}
	}
}

// healthBook holds the last sync's report for the kubelet's health streams.
type healthBook struct {
	mu      sync.Mutex
	report  []kubeletplugin.DeviceHealth
	changed chan struct{} // closed and replaced on every set that changes the report
}

func newHealthBook() *healthBook { return &healthBook{changed: make(chan struct{})} }

// set records a sync's report; streams are woken only when some device's health or message
// changed.
func (b *healthBook) set(report []kubeletplugin.DeviceHealth) {
	b.mu.Lock()
	defer b.mu.Unlock()
	same := len(report) == len(b.report)
	for i := 0; same && i < len(report); i++ {
		o, n := b.report[i], report[i]
		same = o.DeviceName == n.DeviceName && o.Health == n.Health && o.Message == n.Message
	}
	b.report = report
	if !same {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// get returns the current report and the channel closed at its next change.
func (b *healthBook) get() ([]kubeletplugin.DeviceHealth, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]kubeletplugin.DeviceHealth(nil), b.report...), b.changed
}

// stream sends the current report at once, on every change, and every resend otherwise,
// until ctx ends. A report no sync refreshed within stale has its devices sent as Unknown:
// the stream repeats only what the driver still vouches for.
func (b *healthBook) stream(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport, resend, stale time.Duration, now func() time.Time) error {
	t := time.NewTicker(resend)
	defer t.Stop()
	for {
		report, changed := b.get()
		at := now()
		for i := range report {
			if at.Sub(report[i].LastUpdated) > stale {
				report[i].Health, report[i].Message = kubeletplugin.HealthStatusUnknown, "the driver has not observed the GPU recently"
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- kubeletplugin.DeviceHealthReport{Devices: report}:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
	}
}
