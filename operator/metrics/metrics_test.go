package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestDependencyReady(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetDependency(DependencyNFD, true)
	m.SetDependency(DependencyKMM, false)
	m.SetDependency(DependencyCertManager, false)
	m.ForgetDependency(DependencyCertManager)
	m.ForgetDependency(DependencyPrometheusOperator)
	want := `
# HELP slicer_operator_dependency_ready 1 when the dependency (nfd, kmm, prometheus_operator, cert_manager, driver) is installed or ready, 0 otherwise; no series for a dependency the Slicer's spec does not use.
# TYPE slicer_operator_dependency_ready gauge
slicer_operator_dependency_ready{dependency="kmm"} 0
slicer_operator_dependency_ready{dependency="nfd"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, err := New(reg); err == nil {
		t.Error("second registration accepted")
	}
}
