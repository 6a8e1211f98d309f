package catalog

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricNames(t *testing.T) {
	tests := map[string]struct {
		expr    string
		want    []string
		wantErr bool
	}{
		"selector":      {expr: `up`, want: []string{"up"}},
		"matchers":      {expr: `up{job="a}b", instance=~"$instance"} == 1`, want: []string{"up"}},
		"aggregation":   {expr: `sum by (node, gpu) (rate(x_total{a="b"}[$__rate_interval]))`, want: []string{"x_total"}},
		"trailing by":   {expr: `sum(rate(x_total[5m])) by (job) / on (job) group_left (node) y`, want: []string{"x_total", "y"}},
		"recording":     {expr: `slicer:ratio:avg * 100`, want: []string{"slicer:ratio:avg"}},
		"keywords":      {expr: `a > bool 1 and b unless c or d offset 5m`, want: []string{"a", "b", "c", "d"}},
		"functions":     {expr: `histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) - time()`, want: []string{"h_bucket"}},
		"strings":       {expr: `label_replace(m, "node", "$1", "x", "(.+) up")`, want: []string{"m"}},
		"grafana vars":  {expr: `${metric} + $other + real`, want: []string{"real"}},
		"numbers":       {expr: `1e3 * 0x1f + .5 * 7 * 24 * 3600 + x`, want: []string{"x"}},
		"subquery":      {expr: `max_over_time(rate(c_total[1m])[5m:1m])`, want: []string{"c_total"}},
		"absent":        {expr: `absent(up{job="s"} == 1)`, want: []string{"up"}},
		"vector":        {expr: `count(x) or vector(0)`, want: []string{"x"}},
		"comment":       {expr: "a # b c\n+ d", want: []string{"a", "d"}},
		"duplicates":    {expr: `x / x`, want: []string{"x"}},
		"unbalanced":    {expr: `sum(x{a="b"`, wantErr: true},
		"stray closing": {expr: `x)`, wantErr: true},
		"unterminated":  {expr: `x{a="b}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := MetricNames(tc.expr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("MetricNames(%q) (-want +got):\n%s", tc.expr, diff)
			}
		})
	}
}

func TestParseDesc(t *testing.T) {
	d := prometheus.NewDesc("a_total", `help with "quotes", {braces} and, commas`, []string{"x", "y"}, prometheus.Labels{"c": "v"})
	got, err := ParseDesc(d.String())
	if err != nil {
		t.Fatal(err)
	}
	want := Metric{Name: "a_total", Help: `help with "quotes", {braces} and, commas`, Labels: []string{"x", "y"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseDesc (-want +got):\n%s", diff)
	}
	if _, err := ParseDesc("nonsense"); err == nil {
		t.Error("ParseDesc accepted nonsense")
	}
}

func TestRegistered(t *testing.T) {
	ms, err := Registered()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := Listed()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	components := map[string]int{}
	for _, m := range ms {
		if seen[m.Name] {
			t.Errorf("metric %s registered twice", m.Name)
		}
		seen[m.Name] = true
		components[m.Component]++
		prefix := "slicer_" + m.Component + "_"
		if !strings.HasPrefix(m.Name, prefix) {
			t.Errorf("metric %s of component %s lacks the prefix %s", m.Name, m.Component, prefix)
		}
		switch m.Type {
		case "counter":
			if !strings.HasSuffix(m.Name, "_total") {
				t.Errorf("counter %s does not end in _total", m.Name)
			}
		case "gauge", "histogram":
			if strings.HasSuffix(m.Name, "_total") {
				t.Errorf("%s %s ends in _total", m.Type, m.Name)
			}
		default:
			t.Errorf("metric %s has type %s", m.Name, m.Type)
		}
		if m.Help == "" {
			t.Errorf("metric %s has no help", m.Name)
		}
		if listed[m.Name] != "" {
			t.Errorf("metric %s is registered but also listed as external or planned", m.Name)
		}
	}
	for _, c := range Components() {
		if components[c.Name] == 0 {
			t.Errorf("component %s registers no metric", c.Name)
		}
	}
}

// TestLibraryBuiltinsExist checks the controller-runtime and kube-scheduler
// names in External against the module sources in go.mod.
func TestLibraryBuiltinsExist(t *testing.T) {
	dir := func(module string) string {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", module, err)
		}
		return strings.TrimSpace(string(out))
	}
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	cr := dir("sigs.k8s.io/controller-runtime")
	crSource := read(filepath.Join(cr, "pkg/internal/controller/metrics/metrics.go")) +
		read(filepath.Join(cr, "pkg/webhook/internal/metrics/metrics.go"))
	k8s := dir("k8s.io/kubernetes")
	schedSource := read(filepath.Join(k8s, "pkg/scheduler/metrics/metrics.go"))
	workqueue := read(filepath.Join(dir("k8s.io/client-go"), "util/workqueue/metrics.go")) +
		read(filepath.Join(cr, "pkg/metrics/workqueue.go"))
	for _, name := range SortedKeys(External) {
		var ok bool
		switch {
		case strings.HasPrefix(name, "controller_runtime_"):
			ok = strings.Contains(crSource, `"`+name+`"`)
		case strings.HasPrefix(name, "scheduler_"):
			ok = strings.Contains(schedSource, `"`+strings.TrimPrefix(name, "scheduler_")+`"`)
		case strings.HasPrefix(name, "workqueue_"):
			ok = strings.Contains(workqueue, `"`+strings.TrimPrefix(name, "workqueue_")+`"`)
		default:
			continue
		}
		if !ok {
			t.Errorf("%s (%s) is not defined in the vendored module source", name, External[name])
		}
	}
}
