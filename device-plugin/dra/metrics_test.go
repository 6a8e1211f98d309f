package dra

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/slicer-operator/slicer/device-plugin/engine"
)

// Instance states as the metrics spell them (engine.Metrics.Record): in DRA mode an instance
// is allocated when a claim holds its device, orphaned otherwise.
const (
	stateAllocated = "allocated"
	stateOrphaned  = "orphaned"
)

// An instance a claim holds is counted allocated, with the claim's namespace and pod on its
// slice_info series, with the GPU's UUID and the GPU instance id under DCGM exporter's label
// names; one no claim holds is orphaned; each profile with a smaller one has its step-down
// series; a second recording drops gone series.
func TestRecordMetrics(t *testing.T) {
	m := engine.NewMetrics(prometheus.NewRegistry())
	obs := &engine.Observation{GPUs: []*engine.GPU{{Index: 0, UUID: "GPU-0", Model: h100(t), Healthy: true, MIGSupported: true, MIGMode: 1, Slices: []engine.Slice{
		{Slot: slot("1g.10gb", 3, 1), GI: 9, CI: 0, MIGUUID: "MIG-1"},
		{Slot: slot("3g.40gb", 4, 4), GI: 2, CI: 0, MIGUUID: "MIG-2"},
	}}}}
	c := claim("a", "node-1", "gpu-0-3g-40gb-at-4")
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u"}}
	recordMetrics(m, obs, holders([]*resourceapi.ResourceClaim{&c}, "node-1"), nil)
	if got := testutil.ToFloat64(m.Instances.WithLabelValues("0", "3g.40gb", stateAllocated)); got != 1 {
		t.Fatalf("allocated 3g.40gb = %v", got)
	}
	if got := testutil.ToFloat64(m.Instances.WithLabelValues("0", "1g.10gb", stateOrphaned)); got != 1 {
		t.Fatalf("orphaned 1g.10gb = %v", got)
	}
	if got := testutil.ToFloat64(m.SliceInfo.WithLabelValues("0", "3g.40gb", "4:4", stateAllocated, "ns", "p", "GPU-0", "2")); got != 1 {
		t.Fatalf("slice_info of the claim's slice = %v", got)
	}
	if got := testutil.ToFloat64(m.SliceInfo.WithLabelValues("0", "1g.10gb", "3:1", stateOrphaned, "", "", "GPU-0", "9")); got != 1 {
		t.Fatalf("slice_info of the orphaned slice = %v", got)
	}
	if n := testutil.CollectAndCount(m.SliceInfo); n != 2 {
		t.Fatalf("%d slice_info series, want 2", n)
	}
	// H100-80GB: every profile but 1g.10gb and 1g.10gb+me has a smaller one.
	if got := testutil.ToFloat64(m.StepDown.WithLabelValues("0", "3g.40gb", "2g.20gb")); got != 20e9 {
		t.Fatalf("step down of 3g.40gb = %v, want 20e9", got)
	}
	if n := testutil.CollectAndCount(m.StepDown); n != 5 {
		t.Fatalf("%d step-down series, want 5", n)
	}
	if got := testutil.ToFloat64(m.FreeCompute.WithLabelValues("0")); got != 3 {
		t.Fatalf("free compute slices = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.GPUModes.WithLabelValues("mig")); got != 1 {
		t.Fatalf("GPUs in mode mig = %v, want 1", got)
	}
	obs.GPUs[0].Slices = nil
	recordMetrics(m, obs, nil, nil)
	if n := testutil.CollectAndCount(m.SliceInfo); n != 0 {
		t.Fatalf("%d slice_info series after the slices went", n)
	}
	obs.GPUs = nil
	recordMetrics(m, obs, nil, nil)
	if n := testutil.CollectAndCount(m.StepDown); n != 0 {
		t.Fatalf("%d step-down series after the GPU went", n)
	}
}
