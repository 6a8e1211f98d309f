package engine

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml"
	"github.com/slicer-operator/slicer/internal/mig"
)

// MIG operation label values.
const (
	opCreateGI  = "create_gi"
	opCreateCI  = "create_ci"
	opDestroyCI = "destroy_ci"
	opDestroyGI = "destroy_gi"
)

// Metrics are the agent's Prometheus collectors. Label values are bounded:
// gpu is the device index (0–15), profile a table profile name, state one of
// four slice states, return an NVML return-code name. slicer_agent_slice_info
// is the one kube-state-metrics-style object-state gauge: one series per
// existing slice (at most 7 per GPU, 16 GPUs per node) carrying its pod, and the GPU's UUID and
// the GPU instance id under DCGM exporter's label names (UUID, GPU_I_ID) so its per-MIG series
// join to a slice and its pod (docs/monitoring.md). StepDown has one series per profile of
// each MIG GPU that has a smaller one (at most 10 per GPU).
type Metrics struct {
	// recordMu serializes Record; recorded are the series of each per-GPU and per-slice
	// vector the last Record wrote (the next deletes those it does not write again).
	recordMu sync.Mutex
	recorded map[*prometheus.GaugeVec]map[string][]string

	Instances       *prometheus.GaugeVec
	SliceInfo       *prometheus.GaugeVec
	StepDown        *prometheus.GaugeVec
	Operations      *prometheus.CounterVec
	OpDuration      *prometheus.HistogramVec
	NVMLErrors      *prometheus.CounterVec
	OrphansReclaim  *prometheus.CounterVec
	Conflicts       prometheus.Counter
	PodGone         prometheus.Counter
	PodFinished     prometheus.Counter
	Registrations   *prometheus.CounterVec
	AllocateResults *prometheus.CounterVec
	DRARequests     *prometheus.CounterVec
	CDIWrites       *prometheus.CounterVec
	FreeCompute     *prometheus.GaugeVec
	FreeMemory      *prometheus.GaugeVec
	ComputeSlices   *prometheus.GaugeVec
	MemorySlices    *prometheus.GaugeVec
	Fragmentation   *prometheus.GaugeVec
	RealizeDuration prometheus.Histogram
	XIDs            *prometheus.CounterVec
	XIDLast         *prometheus.GaugeVec
	GPUHealthy      *prometheus.GaugeVec
	// GPU modes (mode_metrics.go).
	GPUModes           *prometheus.GaugeVec
	ModeSwitch         *prometheus.GaugeVec
	ModeSwitchRequests *prometheus.CounterVec
	ModeSwitchDuration *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_mig_instances", Help: "MIG instances on the node's GPUs by GPU index, profile and state (allocated, free, pending_delete, orphaned).",
		}, []string{"gpu", "profile", "state"}),
		SliceInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_slice_info", Help: "One series (value 1) per existing MIG slice with its placement, state, holder pod, and its GPU's UUID and GPU instance id as DCGM exporter labels them (UUID, GPU_I_ID; object-state metric; at most 7 slices per GPU).",
		}, []string{"gpu", "profile", "placement", "state", "namespace", "pod", "UUID", "GPU_I_ID"}),
		StepDown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_mig_profile_step_down_memory_bytes", Help: "Per MIG GPU and profile, the nominal memory of the next smaller profile of the GPU's model (smaller_profile: the most compute among the largest memory below); absent for the smallest profiles. Right-sizing rules compare peak framebuffer use with it.",
		}, []string{"gpu", "profile", "smaller_profile"}),
		Operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_mig_operations_total", Help: "MIG operations by operation (create_gi, create_ci, destroy_ci, destroy_gi) and result (success, error, in_use).",
		}, []string{"operation", "result"}),
		OpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "slicer_agent_mig_operation_duration_seconds", Help: "Duration of MIG operations.",
			Buckets: []float64{0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"operation"}),
		NVMLErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_nvml_errors_total", Help: "NVML calls that failed, by NVML return code.",
		}, []string{"return"}),
		OrphansReclaim: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_orphan_instances_reclaimed_total", Help: "MIG instances the agent destroyed because no allocation held them (no_allocation) or their allocation was released (pod_gone).",
		}, []string{"reason"}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slicer_agent_allocation_conflicts_total", Help: "Allocations refused because their slot overlaps a slice another allocation holds; in DRA mode, claims refused because their device overlaps an instance the node prepared for another claim (must stay 0).",
		}),
		PodGone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slicer_agent_allocations_pod_gone_total", Help: "Allocations the agent released because their pod does not exist (no pod of that name, or one with another UID), as read from the API server.",
		}),
		PodFinished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slicer_agent_allocations_pod_finished_total", Help: "Allocations the agent released because their pod finished (phase Succeeded or Failed, with the allocation's pod UID), as read from the API server.",
		}),
		Registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_device_plugin_registrations_total", Help: "Device plugin registrations with the kubelet by result.",
		}, []string{"result"}),
		AllocateResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_device_plugin_allocate_total", Help: "Device plugin Allocate calls by result (success, unknown_device, error).",
		}, []string{"result"}),
		DRARequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_dra_claims_total", Help: "ResourceClaims the kubelet asked the DRA plugin to prepare or unprepare, by operation (prepare, unprepare) and result (success, error).",
		}, []string{"operation", "result"}),
		CDIWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_cdi_spec_writes_total", Help: "CDI spec writes and removals by result.",
		}, []string{"result"}),
		FreeCompute: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_free_compute_slices", Help: "Compute slices not held by any GPU instance, per GPU.",
		}, []string{"gpu"}),
		FreeMemory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_free_memory_slices", Help: "Memory slices not held by any GPU instance, per GPU.",
		}, []string{"gpu"}),
		ComputeSlices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_compute_slices", Help: "Compute slices of each MIG-enabled GPU (its model's total), per GPU.",
		}, []string{"gpu"}),
		MemorySlices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_memory_slices", Help: "Memory slices of each MIG-enabled GPU (its model's total), per GPU.",
		}, []string{"gpu"}),
		Fragmentation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_fragmentation_ratio", Help: "1 - (compute slices of the largest profile that still fits / free compute slices); 0 when the GPU is full or unfragmented.",
		}, []string{"gpu"}),
		XIDs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_gpu_xid_errors_total", Help: "XID errors NVML reported, by GPU index, XID (1-255, else other) and scope: gpu (the GPU is unhealthy), instance (one MIG instance is), application (an application's fault; nothing is).",
		}, []string{"gpu", "xid", "scope"}),
		XIDLast: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_xid_last_timestamp_seconds", Help: "When the last XID of each GPU index, XID and scope (as in slicer_agent_gpu_xid_errors_total) was reported, in Unix seconds (SlicerGPUXIDError fires for 10 minutes after).",
		}, []string{"gpu", "xid", "scope"}),
		GPUHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_healthy", Help: "1 when the GPU is healthy, 0 when it is not (an NVML error, an XID that means it is broken, a recovery action the driver asks for), per GPU.",
		}, []string{"gpu"}),
		RealizeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "slicer_agent_realize_duration_seconds", Help: "Time from the agent first seeing an allocation to its slice being Ready (DRA: from the kubelet's prepare call to the claim prepared).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		GPUModes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpus", Help: "The node's GPUs by the mode the agent's NodeAccelerator status gives them (status.gpus[].mode): whole, mig, or switching (NVML reports a change of MIG mode pending). A GPU whose MIG mode was not read is in none.",
		}, []string{"mode"}),
		ModeSwitch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_agent_gpu_mode_switch_info", Help: "One series (value 1) per GPU whose NodeAccelerator status shows a MIG mode switch not done (status.gpus[].modeSwitch), by GPU index, target_mode (whole, mig), phase (pending, failed) and reason (held_by_client, reset_required, reset_not_allowed, instances_present, nvml_error); absent once the GPU is in its target mode. SlicerGPUModeSwitchStuck fires on it.",
		}, []string{"gpu", "target_mode", "phase", "reason"}),
		ModeSwitchRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicer_agent_gpu_mode_switch_requests_total", Help: "SetMIGMode calls the agent made, by target_mode (whole, mig) and result: done (the mode is current at once), cancelled (the target is the current mode: a pending change undone), held_by_client or reset_required (pending), instances_present or nvml_error (refused). A switch held by a client is asked again on every pass, and each call counts.",
		}, []string{"target_mode", "result"}),
		ModeSwitchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "slicer_agent_gpu_mode_switch_duration_seconds", Help: "Time a GPU's MIG mode switch took, by target_mode (whole, mig), observed when the agent writes the NodeAccelerator status that shows the GPU in its target mode. The agent keeps no memory across restarts: a switch the status it replaces showed pending is timed from that modeSwitch.lastTransitionTime (which restarts when the switch's reason changes; a change asked by hand that NVML reports pending counts too); one SetMIGMode made current at once, never shown pending, by the call.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 9),
		}, []string{"target_mode"}),
	}
	if reg != nil {
		for _, c := range m.Collectors() {
			reg.MustRegister(c)
		}
	}
	return m
}

// Collectors lists every collector (for registration and docs generation).
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Instances, m.SliceInfo, m.StepDown, m.Operations, m.OpDuration, m.NVMLErrors, m.OrphansReclaim,
		m.Conflicts, m.PodGone, m.PodFinished, m.Registrations, m.AllocateResults, m.DRARequests, m.CDIWrites, m.FreeCompute, m.FreeMemory,
		m.ComputeSlices, m.MemorySlices, m.Fragmentation, m.RealizeDuration, m.XIDs, m.XIDLast, m.GPUHealthy,
		m.GPUModes, m.ModeSwitch, m.ModeSwitchRequests, m.ModeSwitchDuration}
}

func (m *Metrics) migOp(op string, d time.Duration, err error) {
	result := "success"
	switch {
	case nvml.IsInUse(err):
		result = "in_use"
	case err != nil:
		result = "error"
	}
	m.Operations.WithLabelValues(op, result).Inc()
	m.OpDuration.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.NVMLError(err)
	}
}

// NVMLError counts an NVML error by its return code (nothing for nil).
func (m *Metrics) NVMLError(err error) {
	if err != nil {
		m.NVMLErrors.WithLabelValues(nvml.ReturnOf(err).String()).Inc()
	}
}

func gpuLabel(i int) string { return strconv.Itoa(i) }

// stateLabel is the metric spelling of a slice state.
var stateLabel = map[slicerv1alpha1.SliceState]string{
	slicerv1alpha1.SliceAllocated: "allocated", slicerv1alpha1.SliceFree: "free",
	slicerv1alpha1.SlicePendingDelete: "pending_delete", slicerv1alpha1.SliceOrphaned: "orphaned",
}

// Record sets the per-GPU and per-slice gauges from an observation, for either frontend:
// every slice of each MIGReady GPU in the state holder gives it, with the namespace and
// pod it serves ("" when none); series of slices and GPUs that went away are dropped. The
// new values are written in place and only the series that went away are deleted, so a
// reader (a scrape) never sees a series that exists before and after missing, or at 0,
// halfway through (gaugePass).
func (m *Metrics) Record(obs *Observation, holder func(g *GPU, s Slice) (state slicerv1alpha1.SliceState, namespace, pod string)) {
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	p := newGaugePass()
	for _, g := range obs.GPUs {
		healthy := 0.0
		if g.Healthy {
			healthy = 1
		}
		p.set(m.GPUHealthy, healthy, gpuLabel(g.Index))
		if !g.MIGReady() {
			continue
		}
		for _, s := range g.Slices {
			state, ns, pod := holder(g, s)
			m.recordSlice(p, g.Index, s, stateLabel[state], ns, pod)
		}
		m.recordGPU(p, g)
	}
	if m.recorded == nil {
		m.recorded = map[*prometheus.GaugeVec]map[string][]string{}
	}
	for _, v := range []*prometheus.GaugeVec{m.Instances, m.SliceInfo, m.StepDown, m.FreeCompute, m.FreeMemory, m.ComputeSlices, m.MemorySlices, m.Fragmentation, m.GPUHealthy} {
		m.recorded[v] = p.write(v, m.recorded[v])
	}
}

// gaugePass is what one Record gives each per-GPU and per-slice gauge vector: values by
// series (label values joined), written by write.
type gaugePass struct {
	vals   map[*prometheus.GaugeVec]map[string]float64
	labels map[string][]string
}

func newGaugePass() *gaugePass {
	return &gaugePass{vals: map[*prometheus.GaugeVec]map[string]float64{}, labels: map[string][]string{}}
}

func seriesKey(lvs []string) string { return strings.Join(lvs, "\x00") }

// set gives series lvs of v the value x; add adds to it.
func (p *gaugePass) set(v *prometheus.GaugeVec, x float64, lvs ...string) { p.put(v, lvs, x, false) }
func (p *gaugePass) add(v *prometheus.GaugeVec, x float64, lvs ...string) { p.put(v, lvs, x, true) }

func (p *gaugePass) put(v *prometheus.GaugeVec, lvs []string, x float64, add bool) {
	if p.vals[v] == nil {
		p.vals[v] = map[string]float64{}
	}
	k := seriesKey(lvs)
	p.labels[k] = lvs
	if add {
		x += p.vals[v][k]
	}
	p.vals[v][k] = x
}

// write sets v's series to the pass's values, deletes those of before (the series the
// previous pass wrote) it did not give, and returns the series it wrote.
func (p *gaugePass) write(v *prometheus.GaugeVec, before map[string][]string) map[string][]string {
	now := make(map[string][]string, len(p.vals[v]))
	for k, x := range p.vals[v] {
		v.WithLabelValues(p.labels[k]...).Set(x)
		now[k] = p.labels[k]
	}
	for k, lvs := range before {
		if _, ok := now[k]; !ok {
			v.DeleteLabelValues(lvs...)
		}
	}
	return now
}

// recordSlice counts one MIG instance of GPU gpu in state (its metric spelling) and sets its
// info series, with the namespace and pod it serves ("" when none), its GPU's UUID (the
// slot's GPU) and its GPU instance id.
func (m *Metrics) recordSlice(p *gaugePass, gpu int, s Slice, state, namespace, pod string) {
	gl, profile := gpuLabel(gpu), mig.LegalProfileName(s.Profile)
	p.add(m.Instances, 1, gl, profile, state)
	p.set(m.SliceInfo, 1, gl, profile, fmt.Sprintf("%d:%d", s.Placement.Start, s.Placement.Size), state, namespace, pod,
		s.GPU, strconv.Itoa(s.GI))
}

// recordGPU sets a MIG-enabled GPU's capacity, free room and fragmentation gauges from its
// instances: fragmentation is the share of the free compute slices the largest profile that
// still fits cannot use.
func (m *Metrics) recordGPU(p *gaugePass, g *GPU) {
	gl := gpuLabel(g.Index)
	p.set(m.ComputeSlices, float64(g.Model.ComputeSlices()), gl)
	p.set(m.MemorySlices, float64(g.Model.MemorySlices()), gl)
	for _, prof := range g.Model.Profiles() {
		if q, ok := prof.StepDown(); ok {
			p.set(m.StepDown, float64(q.MemoryBytes()), gl, mig.LegalProfileName(prof.Name), mig.LegalProfileName(q.Name))
		}
	}
	st, err := mig.Occupancy(g.Model, g.AppendOccupants(make([]mig.Occupant, 0, len(g.Slices))), mig.FailOnMisfit)
	if err != nil {
		return
	}
	free := st.FreeComputeSlices()
	p.set(m.FreeCompute, float64(free), gl)
	p.set(m.FreeMemory, float64(g.Model.MemorySlices()-st.UsedMemorySlices()), gl)
	largest := 0
	for _, prof := range g.Model.Profiles() {
		if st.Fits(prof) && prof.ComputeSlices > largest {
			largest = prof.ComputeSlices
		}
	}
	frag := 0.0
	if free > 0 {
		frag = 1 - float64(largest)/float64(free)
	}
	p.set(m.Fragmentation, frag, gl)
}
