package operator_test

import (
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slicer-operator/slicer/operator/metrics"
)

func testutilGauge(m *metrics.Metrics, dependency string) float64 {
	return testutil.ToFloat64(m.DependencyReady.WithLabelValues(dependency))
}
