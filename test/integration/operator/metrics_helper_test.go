package operator_test

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/slicer-operator/slicer/operator/metrics"
)

func testutilGauge(m *metrics.Metrics, dependency string) float64 {
	return testutil.ToFloat64(m.DependencyReady.WithLabelValues(dependency))
}

// dependencySeries reads slicer_operator_dependency_ready without creating
// series (WithLabelValues would): dependency → value.
func dependencySeries(m *metrics.Metrics) map[string]float64 {
	ch := make(chan prometheus.Metric, 16)
	m.DependencyReady.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for metric := range ch {
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			panic(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "dependency" {
				out[l.GetValue()] = pb.GetGauge().GetValue()
			}
		}
	}
	return out
}
