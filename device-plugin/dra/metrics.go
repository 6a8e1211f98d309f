package dra

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// holder is the claim holding a device: the NodeAccelerator's claim reference, and for the
// slice_info labels its namespace and the pod it is reserved for (empty when none).
type holder struct {
	Namespace, Name, Pod string
	UID                  types.UID
}

// holders maps each device of pool held by an allocated claim to that claim.
func holders(claims []*resourceapi.ResourceClaim, pool string) map[string]holder {
	out := map[string]holder{}
	for _, c := range claims {
		devs, err := claimDevices(c, pool)
		if err != nil {
			continue
		}
		h := holder{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.APIGroup == "" {
				h.Pod = r.Name
				break
			}
		}
		for _, d := range devs {
			out[d.Device] = h
		}
	}
	return out
}

// recordHolders sets in held the claim of record r as the holder of the instances r keeps:
// the node gave them to that claim, whatever the API allocates now (a claim deleted from the
// API while its pod runs still holds them, and one allocated the device since does not).
func recordHolders(held map[string]holder, obs *engine.Observation, r record) {
	h := holder{Namespace: r.Claim.Namespace, Name: r.Claim.Name, UID: types.UID(r.UID)}
	if len(r.Claim.Pods) > 0 {
		h.Pod = r.Claim.Pods[0].Name
	}
	if h.Namespace == "" || h.Name == "" {
		return // a record written before claims were recorded: shown as it was, orphaned
	}
	for _, s := range recordedSlices(obs, r) {
		if name, ok := sliceDevice(obs.GPUByUUID(s.GPU), s); ok {
			held[name] = h
		}
	}
}

// holderOf is the claim holding observed slice s of GPU g, and the slice's device name.
func holderOf(held map[string]holder, g *engine.GPU, s engine.Slice) (holder, string, bool) {
	name, ok := sliceDevice(g, s)
	if !ok {
		return holder{}, "", false
	}
	h, ok := held[name]
	return h, name, ok
}

// claimView is the NodeAccelerator's view of the node (engine.StatusWriter): each instance
// whose device an allocated claim holds is that claim's, as metrics count it allocated.
func claimView(held map[string]holder) func(*engine.GPU, engine.Slice) (slicerv1alpha1.ClaimReference, bool) {
	return func(g *engine.GPU, s engine.Slice) (slicerv1alpha1.ClaimReference, bool) {
		h, name, ok := holderOf(held, g, s)
		if !ok {
			return slicerv1alpha1.ClaimReference{}, false
		}
		return slicerv1alpha1.ClaimReference{Namespace: h.Namespace, Name: h.Name, UID: string(h.UID), Device: name}, true
	}
}

// recordMetrics sets the per-GPU and per-slice gauges from an observation
// (engine.Metrics.Record): an instance whose device an allocated claim holds is allocated,
// with the claim's namespace and pod, any other orphaned. The GPU mode gauges say what the
// status says: the mode NVML reports and the switch this sync decided (engine.Metrics.RecordModes).
func recordMetrics(m *engine.Metrics, obs *engine.Observation, held map[string]holder, switches map[string]*engine.ModeReport) {
	m.RecordModes(obs, switches)
	m.Record(obs, func(g *engine.GPU, s engine.Slice) (slicerv1alpha1.SliceState, string, string) {
		h, _, ok := holderOf(held, g, s)
		if !ok {
			return slicerv1alpha1.SliceOrphaned, "", ""
		}
		return slicerv1alpha1.SliceAllocated, h.Namespace, h.Pod
	})
}
