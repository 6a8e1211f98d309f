// Package catalog lists the metrics Slicer's components register, read from
// their real constructors on fresh registries, and the metrics they do not
// register but that Slicer's alerts and dashboards may use: built-ins of the
// libraries the components embed, kube-state-metrics and API server series,
// and metrics planned by components that do not expose them yet. The docs
// generator (hack/metricsdoc) and the dashboard and rule consistency tests
// read it.
package catalog

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/slicer-operator/slicer/device-plugin/engine"
	operatormetrics "github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/scheduler/plugin"
	"github.com/slicer-operator/slicer/webhook"
)

// Metric is one metric family a component registers.
type Metric struct {
	Component string
	Name      string
	// Type is counter, gauge, histogram, summary or untyped.
	Type   string
	Help   string
	Labels []string
}

// Component is a Slicer component and the collectors of its metrics struct.
type Component struct {
	Name string
	// Collectors builds the component's metrics on reg, as its binary does,
	// and returns their collectors.
	Collectors func(reg prometheus.Registerer) ([]prometheus.Collector, error)
}

// Components are Slicer's components, each built with its real constructor.
func Components() []Component {
	return []Component{
		{Name: "agent", Collectors: func(reg prometheus.Registerer) ([]prometheus.Collector, error) {
			return engine.NewMetrics(reg).Collectors(), nil
		}},
		{Name: "operator", Collectors: func(reg prometheus.Registerer) ([]prometheus.Collector, error) {
			m, err := operatormetrics.New(reg)
			if err != nil {
				return nil, err
			}
			return m.Collectors(), nil
		}},
		{Name: "scheduler", Collectors: func(reg prometheus.Registerer) ([]prometheus.Collector, error) {
			m, err := plugin.NewMetrics(reg)
			if err != nil {
				return nil, err
			}
			return m.Collectors(), nil
		}},
		{Name: "webhook", Collectors: func(reg prometheus.Registerer) ([]prometheus.Collector, error) {
			m, err := webhook.NewMetrics(reg)
			if err != nil {
				return nil, err
			}
			return m.Collectors(), nil
		}},
	}
}

// Registered returns every metric family of every component, sorted by name.
func Registered() ([]Metric, error) {
	var out []Metric
	for _, c := range Components() {
		ms, err := describe(c)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func describe(c Component) ([]Metric, error) {
	reg := prometheus.NewPedanticRegistry()
	collectors, err := c.Collectors(reg)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", c.Name, err)
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("%s metrics: gather: %w", c.Name, err)
	}
	gathered := map[string]dto.MetricType{}
	for _, f := range families {
		gathered[f.GetName()] = f.GetType()
	}
	var out []Metric
	for _, col := range collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := ParseDesc(d.String())
			if err != nil {
				return nil, fmt.Errorf("%s metrics: %w", c.Name, err)
			}
			m.Component = c.Name
			if t, ok := gathered[m.Name]; ok {
				m.Type = strings.ToLower(t.String())
			} else {
				m.Type = collectorType(col)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// collectorType is the type of a collector with no child yet (a vector
// whose label values are set only when observed).
func collectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return "untyped"
}

var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*")(?:, unit: "(?:[^"\\]|\\.)*")?, constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// ParseDesc reads the name, help and variable labels from a
// prometheus.Desc's String form (client_golang has no accessors).
func ParseDesc(s string) (Metric, error) {
	m := descPattern.FindStringSubmatch(s)
	if m == nil {
		return Metric{}, fmt.Errorf("unexpected descriptor %s", s)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return Metric{}, fmt.Errorf("descriptor name in %s: %w", s, err)
	}
	help, err := strconv.Unquote(m[2])
	if err != nil {
		return Metric{}, fmt.Errorf("descriptor help in %s: %w", s, err)
	}
	var labels []string
	if m[4] != "" {
		for _, l := range strings.Split(m[4], ",") {
			if strings.HasPrefix(l, "c(") && strings.HasSuffix(l, ")") {
				l = l[2 : len(l)-1]
			}
			labels = append(labels, l)
		}
	}
	return Metric{Name: name, Help: help, Labels: labels}, nil
}
