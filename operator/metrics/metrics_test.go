package metrics

import (
	"strings"
	"testing"
	"time"

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
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slicer_operator_dependency_ready"); err != nil {
		t.Error(err)
	}
	if _, err := New(reg); err == nil {
		t.Error("second registration accepted")
	}
}

func TestRecordUpgrade(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"slicer_operator_driver_nodes", "slicer_operator_driver_upgrade_nodes", "slicer_operator_driver_upgrade_step_start_timestamp_seconds", "slicer_operator_driver_upgrade_stalled"}
	m.RecordUpgrade(map[string]int{"v1": 2, "v2": 1}, map[string]int{"Drain": 1}, time.Unix(1764590400, 0), true)
	m.RecordUpgrade(map[string]int{"v1": 1, "v2": 2}, map[string]int{"Driver": 1}, time.Unix(1764590460, 0), false)
	want := `
# HELP slicer_operator_driver_nodes Nodes Slicer manages, by the driver version (the KMM Module's version) their KMM version label asks for; empty for a node not labelled yet.
# TYPE slicer_operator_driver_nodes gauge
slicer_operator_driver_nodes{version="v1"} 1
slicer_operator_driver_nodes{version="v2"} 2
# HELP slicer_operator_driver_upgrade_nodes Nodes under way in a driver upgrade, by step (Drain, Driver, Verify).
# TYPE slicer_operator_driver_upgrade_nodes gauge
slicer_operator_driver_upgrade_nodes{step="Drain"} 0
slicer_operator_driver_upgrade_nodes{step="Driver"} 1
slicer_operator_driver_upgrade_nodes{step="Verify"} 0
# HELP slicer_operator_driver_upgrade_step_start_timestamp_seconds When the node under way the longest in a driver upgrade entered its step (Unix seconds); absent while no node is under way.
# TYPE slicer_operator_driver_upgrade_step_start_timestamp_seconds gauge
slicer_operator_driver_upgrade_step_start_timestamp_seconds 1.76459046e+09
# HELP slicer_operator_driver_upgrade_stalled 1 while the driver rollout is stopped on a node (a pod that does not leave, KMM failing to load, the agent not back), 0 otherwise.
# TYPE slicer_operator_driver_upgrade_stalled gauge
slicer_operator_driver_upgrade_stalled 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// Done: a version no node asks for and the step start go.
	m.RecordUpgrade(map[string]int{"v2": 3}, nil, time.Time{}, false)
	want = `
# HELP slicer_operator_driver_nodes Nodes Slicer manages, by the driver version (the KMM Module's version) their KMM version label asks for; empty for a node not labelled yet.
# TYPE slicer_operator_driver_nodes gauge
slicer_operator_driver_nodes{version="v2"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slicer_operator_driver_nodes", "slicer_operator_driver_upgrade_step_start_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	m.ForgetUpgrade()
	if n, err := testutil.GatherAndCount(reg, "slicer_operator_driver_nodes", "slicer_operator_driver_upgrade_nodes"); err != nil || n != 0 {
		t.Errorf("after ForgetUpgrade: %d series, %v", n, err)
	}
}
