package catalog

import (
	"fmt"
	"sort"

	"github.com/slicer-operator/slicer/prometheusrules"
)

// External are metrics Slicer's alerts and dashboards may use that no
// Slicer metrics struct registers, with where they come from. Built-ins of
// libraries in go.mod (controller-runtime, kube-scheduler) are verified
// against the module source by this package's tests.
var External = map[string]string{
	// Prometheus itself.
	"up": "Prometheus (scrape health)",

	// kube-state-metrics (https://github.com/kubernetes/kube-state-metrics/tree/main/docs/metrics).
	"kube_pod_status_phase":                    "kube-state-metrics",
	"kube_pod_created":                         "kube-state-metrics",
	"kube_pod_container_resource_requests":     "kube-state-metrics",
	"kube_daemonset_status_number_unavailable": "kube-state-metrics",
	"kube_node_labels":                         "kube-state-metrics (needs --metric-labels-allowlist=nodes=[slicer.dev/mig-capable])",

	// NVIDIA DCGM exporter, default counters (docs/monitoring.md: their labels, units and the
	// release read). The slicer.dcgm rules join them to slicer_agent_slice_info.
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "NVIDIA DCGM exporter (default counters; ratio)",
	"DCGM_FI_DEV_FB_USED":           "NVIDIA DCGM exporter (default counters; MiB)",
	"DCGM_FI_DEV_FB_FREE":           "NVIDIA DCGM exporter (default counters; MiB)",

	// kube-apiserver admission metrics.
	"apiserver_admission_webhook_rejection_count": "kube-apiserver",
	"apiserver_admission_webhook_fail_open_count": "kube-apiserver",

	// controller-runtime built-ins (operator, agent, webhook managers).
	"controller_runtime_reconcile_total":         "controller-runtime",
	"controller_runtime_reconcile_errors_total":  "controller-runtime",
	"controller_runtime_reconcile_time_seconds":  "controller-runtime",
	"controller_runtime_webhook_requests_total":  "controller-runtime",
	"controller_runtime_webhook_latency_seconds": "controller-runtime",
	"workqueue_depth":                            "controller-runtime (client-go workqueue)",
	"workqueue_retries_total":                    "controller-runtime (client-go workqueue)",

	// kube-scheduler built-ins (the Slicer scheduler is a kube-scheduler).
	"scheduler_schedule_attempts_total":             "kube-scheduler",
	"scheduler_scheduling_attempt_duration_seconds": "kube-scheduler",
	"scheduler_pending_pods":                        "kube-scheduler",
	"scheduler_plugin_execution_duration_seconds":   "kube-scheduler",
	"scheduler_unschedulable_pods":                  "kube-scheduler",
}

// Planned are metrics the alerts and dashboards already use but no component
// registers yet, with the component expected to expose them. The consistency
// tests accept them; each is a gap to close (and to remove from here).
var Planned = map[string]string{}

// Listed returns every metric the alerts and dashboards may use without a
// Slicer metrics struct registering it, with its source: External, Planned,
// and the object-state series of Slicer's kube-state-metrics configuration
// (prometheusrules/kube-state-metrics.yaml).
func Listed() (map[string]string, error) {
	ksm, err := prometheusrules.KubeStateMetrics()
	if err != nil {
		return nil, fmt.Errorf("kube-state-metrics configuration: %w", err)
	}
	out := map[string]string{}
	for n, src := range External {
		out[n] = src
	}
	for n, src := range Planned {
		out[n] = "planned: " + src
	}
	for n := range ksm {
		out[n] = "kube-state-metrics with prometheusrules/kube-state-metrics.yaml"
	}
	return out, nil
}

// SortedKeys returns the keys of a name map, sorted.
func SortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
