package prometheusrules

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

// KubeStateMetricsConfig is the kube-state-metrics CustomResourceStateMetrics
// configuration that exports the object state of Slicer's custom resources.
//
//go:embed kube-state-metrics.yaml
var KubeStateMetricsConfig []byte

type ksmConfig struct {
	Kind string `json:"kind"`
	Spec struct {
		Resources []struct {
			GroupVersionKind struct {
				Group   string `json:"group"`
				Version string `json:"version"`
				Kind    string `json:"kind"`
			} `json:"groupVersionKind"`
			MetricNamePrefix string `json:"metricNamePrefix"`
			Metrics          []struct {
				Name string `json:"name"`
				Help string `json:"help"`
			} `json:"metrics"`
		} `json:"resources"`
	} `json:"spec"`
}

// KubeStateMetrics returns the metric names the configuration makes
// kube-state-metrics export (prefix_name), each with its help text.
func KubeStateMetrics() (map[string]string, error) {
	var c ksmConfig
	if err := yaml.Unmarshal(KubeStateMetricsConfig, &c); err != nil {
		return nil, fmt.Errorf("parse kube-state-metrics.yaml: %w", err)
	}
	if c.Kind != "CustomResourceStateMetrics" {
		return nil, fmt.Errorf("kube-state-metrics.yaml: kind %q, want CustomResourceStateMetrics", c.Kind)
	}
	out := map[string]string{}
	for _, r := range c.Spec.Resources {
		if r.MetricNamePrefix == "" {
			return nil, fmt.Errorf("kube-state-metrics.yaml: %s has no metricNamePrefix", r.GroupVersionKind.Kind)
		}
		for _, m := range r.Metrics {
			out[r.MetricNamePrefix+"_"+m.Name] = m.Help
		}
	}
	return out, nil
}
