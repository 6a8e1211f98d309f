// Package metrics holds the operator's own metrics; controller-runtime's
// built-in controller and workqueue metrics cover the rest.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Dependencies the operator reports on, the values of the dependency label.
const (
	DependencyNFD                = "nfd"
	DependencyKMM                = "kmm"
	DependencyPrometheusOperator = "prometheus_operator"
	DependencyCertManager        = "cert_manager"
	DependencyDriver             = "driver"
)

// Metrics are the operator's metrics.
type Metrics struct {
	// DependencyReady is 1 when a dependency the Slicer's spec uses is
	// installed (for the driver: loaded), 0 otherwise; no series for one
	// the spec does not use.
	DependencyReady *prometheus.GaugeVec
	// Upgrade are the driver upgrade's series.
	Upgrade *UpgradeMetrics
}

// New builds the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		DependencyReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slicer_operator_dependency_ready",
			Help: "1 when the dependency (nfd, kmm, prometheus_operator, cert_manager, driver) is installed or ready, 0 otherwise; no series for a dependency the Slicer's spec does not use.",
		}, []string{"dependency"}),
		Upgrade: newUpgradeMetrics(),
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Collectors lists every collector, for registration and documentation.
func (m *Metrics) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.DependencyReady}, m.Upgrade.collectors()...)
}

// SetDependency records whether a dependency is ready.
func (m *Metrics) SetDependency(dependency string, ready bool) {
	if m == nil {
		return
	}
	v := 0.0
	if ready {
		v = 1
	}
	m.DependencyReady.WithLabelValues(dependency).Set(v)
}

// ForgetDependency drops the series of a dependency the spec does not use.
func (m *Metrics) ForgetDependency(dependency string) {
	if m == nil {
		return
	}
	m.DependencyReady.DeleteLabelValues(dependency)
}
