// Package prometheusrules holds Slicer's PrometheusRule (alerts and the
// recording rules the dashboards use), embedded so the operator can apply it,
// and helpers to read it.
package prometheusrules

import (
	_ "embed"
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"
)

// PrometheusRule is the monitoring.coreos.com/v1 PrometheusRule manifest.
//
//go:embed slicer.rules.yaml
var PrometheusRule []byte

// RunbookBaseURL prefixes every alert's runbook_url; the path after it is
// docs/runbooks/<alert>.md in this repository.
const RunbookBaseURL = "https://github.com/slicer-operator/slicer/blob/main/"

// Rule is one alerting or recording rule.
type Rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Group is a rule group.
type Group struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Spec is the spec of a PrometheusRule, which is also the format of a
// Prometheus rule file.
type Spec struct {
	Groups []Group `json:"groups"`
}

type manifest struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       Spec           `json:"spec"`
}

// Parse reads a PrometheusRule manifest strictly (unknown fields are errors).
func Parse(data []byte) (*Spec, error) {
	var m manifest
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("parse PrometheusRule: %w", err)
	}
	if m.APIVersion != "monitoring.coreos.com/v1" || m.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("parse PrometheusRule: got %s %s, want monitoring.coreos.com/v1 PrometheusRule", m.APIVersion, m.Kind)
	}
	return &m.Spec, nil
}

// Load parses the embedded PrometheusRule.
func Load() (*Spec, error) { return Parse(PrometheusRule) }

// RuleFile renders the spec as a Prometheus rule file (what promtool and
// prometheus --config.file's rule_files read).
func (s *Spec) RuleFile() ([]byte, error) {
	out, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("render rule file: %w", err)
	}
	return out, nil
}

// Alerts returns the alerting rules in file order (an alert name may appear
// in more than one rule).
func (s *Spec) Alerts() []Rule {
	var out []Rule
	for _, g := range s.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// AlertNames returns the distinct alert names, sorted.
func (s *Spec) AlertNames() []string {
	seen := map[string]bool{}
	for _, r := range s.Alerts() {
		seen[r.Alert] = true
	}
	return sortedKeys(seen)
}

// RecordedNames returns the names of the recording rules, sorted.
func (s *Spec) RecordedNames() []string {
	seen := map[string]bool{}
	for _, g := range s.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				seen[r.Record] = true
			}
		}
	}
	return sortedKeys(seen)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
