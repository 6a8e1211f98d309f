package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// UpgradeMetrics are the driver upgrade's series (docs/driver-upgrade.md, "Observing").
type UpgradeMetrics struct {
	// Nodes counts the nodes Slicer manages by the driver version their KMM version label
	// asks for ("" for none yet); no series for a version no node asks for.
	Nodes *prometheus.GaugeVec
	// UpgradeNodes counts the nodes under way by step (Drain, Driver, Verify), stalled or not.
	UpgradeNodes *prometheus.GaugeVec
	// StepStart is when the node under way the longest entered its step (Unix seconds); no
	// series while no node is under way (a vector without labels, reset then).
	// SlicerDriverUpgradeStuck fires on it.
	StepStart *prometheus.GaugeVec
	// Stalled is 1 while the rollout is stopped on a node (condition DriverUpgraded reason
	// DriverUpgradeStalled), 0 otherwise.
	Stalled prometheus.Gauge

	versions map[string]bool
}

func newUpgradeMetrics() *UpgradeMetrics {
	return &UpgradeMetrics{
		Nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_operator_driver_nodes",
			Help: "Nodes Slicer manages, by the driver version (the KMM Module's version) their KMM version label asks for; empty for a node not labelled yet.",
		}, []string{"version"}),
		UpgradeNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_operator_driver_upgrade_nodes",
			Help: "Nodes under way in a driver upgrade, by step (Drain, Driver, Verify).",
		}, []string{"step"}),
		StepStart: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_operator_driver_upgrade_step_start_timestamp_seconds",
			Help: "When the node under way the longest in a driver upgrade entered its step (Unix seconds); absent while no node is under way.",
		}, nil),
		Stalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "slicer_operator_driver_upgrade_stalled",
			Help: "1 while the driver rollout is stopped on a node (a pod that does not leave, KMM failing to load, the agent not back), 0 otherwise.",
		}),
		versions: map[string]bool{},
	}
}

func (u *UpgradeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{u.Nodes, u.UpgradeNodes, u.StepStart, u.Stalled}
}

// UpgradeSteps are the steps UpgradeNodes has a series for.
var UpgradeSteps = []string{"Drain", "Driver", "Verify"}

// RecordUpgrade sets the series from one decision: nodes by version, nodes by step, the
// oldest step start (zero: none under way) and whether the rollout is stalled.
func (m *Metrics) RecordUpgrade(versions map[string]int, steps map[string]int, oldest time.Time, stalled bool) {
	if m == nil {
		return
	}
	u := m.Upgrade
	for v := range u.versions {
		if versions[v] == 0 {
			u.Nodes.DeleteLabelValues(v)
			delete(u.versions, v)
		}
	}
	for v, n := range versions {
		if n > 0 {
			u.Nodes.WithLabelValues(v).Set(float64(n))
			u.versions[v] = true
		}
	}
	for _, s := range UpgradeSteps {
		u.UpgradeNodes.WithLabelValues(s).Set(float64(steps[s]))
	}
	if oldest.IsZero() {
		u.StepStart.Reset()
	} else {
		u.StepStart.WithLabelValues().Set(float64(oldest.Unix()))
	}
	v := 0.0
	if stalled {
		v = 1
	}
	u.Stalled.Set(v)
}

// ForgetUpgrade drops every upgrade series (no KMM driver: nothing to upgrade).
func (m *Metrics) ForgetUpgrade() {
	if m == nil {
		return
	}
	u := m.Upgrade
	u.Nodes.Reset()
	u.UpgradeNodes.Reset()
	u.versions = map[string]bool{}
	u.StepStart.Reset()
	u.Stalled.Set(0)
}
