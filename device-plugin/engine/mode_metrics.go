package engine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// The GPU mode metrics (docs/gpu-modes.md, "What the agent does"): the gauges say what the
// NodeAccelerator status says of each GPU's mode (renderMode), the counter what each
// SetMIGMode call returned, and the histogram how long a switch took. Label values are
// bounded: three modes, two target modes, two phases, five reasons, six results.

// modeLabel is the metric spelling of a GPU mode.
var modeLabel = map[slicerv1alpha1.GPUMode]string{
	slicerv1alpha1.GPUModeWhole: "whole", slicerv1alpha1.GPUModeMIG: "mig", slicerv1alpha1.GPUModeSwitching: "switching",
}

// switchPhaseLabel and switchReasonLabel are the metric spellings of a switch's phase and
// reason.
var (
	switchPhaseLabel = map[slicerv1alpha1.GPUModeSwitchPhase]string{
		slicerv1alpha1.GPUModeSwitchPending: "pending", slicerv1alpha1.GPUModeSwitchFailed: "failed",
	}
	switchReasonLabel = map[slicerv1alpha1.GPUModeSwitchReason]string{
		slicerv1alpha1.GPUModeSwitchHeldByClient: "held_by_client", slicerv1alpha1.GPUModeSwitchResetRequired: "reset_required",
		slicerv1alpha1.GPUModeSwitchResetNotAllowed: "reset_not_allowed", slicerv1alpha1.GPUModeSwitchInstancesPresent: "instances_present",
		slicerv1alpha1.GPUModeSwitchNVMLError: "nvml_error",
	}
)

// RecordModes sets the GPU mode gauges from an observation and the switch the agent decided
// on this pass for each GPU (reports, by UUID; nil: none), as renderMode renders them in the
// NodeAccelerator status: the count of GPUs in each mode (every mode has a series, 0 when no
// GPU is in it) and one series per GPU with a switch not done. Series of GPUs that went
// away, or whose switch is done, are dropped.
func (m *Metrics) RecordModes(obs *Observation, reports map[string]*ModeReport) {
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	p := newGaugePass()
	for _, l := range modeLabel {
		p.set(m.GPUModes, 0, l)
	}
	if obs != nil {
		for _, g := range obs.GPUs {
			mode, sw := renderMode(g, reports[g.UUID], nil, metav1.Time{})
			if mode == "" {
				continue
			}
			p.add(m.GPUModes, 1, modeLabel[mode])
			if sw != nil {
				p.set(m.ModeSwitch, 1, gpuLabel(g.Index), modeLabel[sw.TargetMode], switchPhaseLabel[sw.Phase], switchReasonLabel[sw.Reason])
			}
		}
	}
	if m.recorded == nil {
		m.recorded = map[*prometheus.GaugeVec]map[string][]string{}
	}
	for _, v := range []*prometheus.GaugeVec{m.GPUModes, m.ModeSwitch} {
		m.recorded[v] = p.write(v, m.recorded[v])
	}
}

// ModeSwitchCalled counts one SetMIGMode call or reset on g for step (step.Set, step.Reset), which returned the
// switch r (SetModeStep; nil: the mode is current). It says whether the call made g's MIG mode
// current at once (a switch done; not a pending change cancelled), whose duration the status
// writer observes (NodeView.ModeSwitchesDone).
func (m *Metrics) ModeSwitchCalled(g *GPU, step ModeStep, r *ModeReport) (done bool) {
	result := "done"
	switch {
	case r != nil:
		result = switchReasonLabel[r.Reason]
	case step.Target == g.MIGMode:
		result = "cancelled"
	}
	m.ModeSwitchRequests.WithLabelValues(modeLabel[modeOf(step.Target)], result).Inc()
	return result == "done"
}

// modeSwitchesDone observes the duration of each switch the status st, written at now, shows
// done (its GPU in a mode with no switch): for one that the status old it replaces showed
// pending to that mode, from the switch's lastTransitionTime there (the agent remembers
// nothing else across restarts); for another, the SetMIGMode call that made it current at
// once on this pass (calls, by UUID). Each switch is observed once: the next write replaces a
// status that no longer shows it pending.
func (m *Metrics) modeSwitchesDone(old, st slicerv1alpha1.NodeAcceleratorStatus, calls map[string]time.Duration, now time.Time) {
	was := oldModeSwitches(old)
	for i := range st.GPUs {
		gs := &st.GPUs[i]
		if gs.ModeSwitch != nil || gs.Mode == "" || gs.Mode == slicerv1alpha1.GPUModeSwitching {
			continue
		}
		o := was[gs.UUID]
		switch d, called := calls[gs.UUID]; {
		case o != nil && o.Phase == slicerv1alpha1.GPUModeSwitchPending && o.TargetMode == gs.Mode && !o.LastTransitionTime.IsZero():
			m.ModeSwitchDuration.WithLabelValues(modeLabel[gs.Mode]).Observe(max(now.Sub(o.LastTransitionTime.Time), 0).Seconds())
		case called:
			m.ModeSwitchDuration.WithLabelValues(modeLabel[gs.Mode]).Observe(d.Seconds())
		}
	}
}
