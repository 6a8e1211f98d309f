package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/hack/metricsdoc/catalog"
	"github.com/slicer-operator/slicer/prometheusrules"
	"github.com/slicer-operator/slicer/prometheusrules/promtest"
)

// schemaVersion is the Grafana dashboard schema the JSON is written for
// (Grafana 10.4 / 11).
const schemaVersion = 39

type dashboard struct {
	ID            *int     `json:"id"`
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	Editable      bool     `json:"editable"`
	Tags          []string `json:"tags"`
	SchemaVersion int      `json:"schemaVersion"`
	Refresh       string   `json:"refresh"`
	Panels        []panel  `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Datasource *datasource `json:"datasource"`
		Expr       string      `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
	Refresh    int             `json:"refresh"`
}

// query is one PromQL expression of a dashboard and where it is.
type query struct{ where, expr string }

func load(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no dashboards")
	}
	out := map[string]dashboard{}
	for name, data := range files {
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = d
	}
	return out
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, allPanels(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

var labelValues = regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)

// queries returns every PromQL expression of a dashboard: panel targets and
// the selectors inside query variables' label_values(...).
func queries(t *testing.T, file string, d dashboard) []query {
	t.Helper()
	var out []query
	for _, p := range allPanels(d.Panels) {
		for i, tg := range p.Targets {
			out = append(out, query{where: fmt.Sprintf("%s panel %q target %d", file, p.Title, i), expr: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s variable %s: %v", file, v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("%s variable %s: query %q is not label_values(<selector>, <label>)", file, v.Name, q.Query)
			continue
		}
		out = append(out, query{where: fmt.Sprintf("%s variable %s", file, v.Name), expr: m[1]})
	}
	return out
}

// covers M4
func TestDashboardConventions(t *testing.T) {
	uids := map[string]string{}
	ranges := regexp.MustCompile(`\[([^\]]*)\]`)
	for file, d := range load(t) {
		if d.UID == "" || len(d.UID) > 40 {
			t.Errorf("%s: uid %q must be set and at most 40 characters", file, d.UID)
		}
		if other, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q also used by %s", file, d.UID, other)
		}
		uids[d.UID] = file
		if d.ID != nil {
			t.Errorf("%s: id must be null", file)
		}
		if d.Editable {
			t.Errorf("%s: editable must be false", file)
		}
		if !contains(d.Tags, "slicer") {
			t.Errorf("%s: tags %v lack slicer", file, d.Tags)
		}
		if d.SchemaVersion != schemaVersion {
			t.Errorf("%s: schemaVersion %d, want %d", file, d.SchemaVersion, schemaVersion)
		}
		if d.Refresh == "" {
			t.Errorf("%s: no refresh", file)
		}
		var dsVars []string
		for _, v := range d.Templating.List {
			if v.Type == "datasource" {
				dsVars = append(dsVars, v.Name)
				continue
			}
			if v.Datasource == nil || !templated(v.Datasource.UID) {
				t.Errorf("%s variable %s: datasource must be ${datasource}", file, v.Name)
			}
			if v.Type == "query" && v.Refresh != 2 {
				t.Errorf("%s variable %s: refresh %d, want 2 (on time range change)", file, v.Name, v.Refresh)
			}
		}
		if len(dsVars) != 1 || dsVars[0] != "datasource" {
			t.Errorf("%s: datasource variables %v, want exactly one named datasource", file, dsVars)
		}
		for _, p := range allPanels(d.Panels) {
			where := fmt.Sprintf("%s panel %q", file, p.Title)
			if p.Title == "" || p.Description == "" {
				t.Errorf("%s: title and description are required", where)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: no unit", where)
			}
			if p.Datasource == nil || !templated(p.Datasource.UID) {
				t.Errorf("%s: datasource must be ${datasource}, got %+v", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			for i, tg := range p.Targets {
				if tg.Datasource == nil || !templated(tg.Datasource.UID) {
					t.Errorf("%s target %d: datasource must be ${datasource}", where, i)
				}
				for _, m := range ranges.FindAllStringSubmatch(tg.Expr, -1) {
					if m[1] != "$__rate_interval" {
						t.Errorf("%s target %d: range [%s], want [$__rate_interval]", where, i, m[1])
					}
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func templated(uid string) bool { return uid == "${datasource}" || uid == "$datasource" }

// linter is grafana's dashboard-linter built from hack/tools/dashboard-linter.
func linter(t *testing.T) string {
	t.Helper()
	path := os.Getenv("DASHBOARD_LINTER")
	if path == "" {
		path = filepath.Join(promtest.RepoRoot(), "bin", "tools", "dashboard-linter")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("dashboard-linter not found at %s: build it with `cd hack/tools/dashboard-linter && go build -o ../../../bin/tools/dashboard-linter github.com/grafana/dashboard-linter` (make test does) or set $DASHBOARD_LINTER: %v", path, err)
	}
	return path
}

func lint(t *testing.T, bin, file string) (string, error) {
	t.Helper()
	out, err := exec.Command(bin, "lint", "--strict", file).CombinedOutput()
	return string(out), err
}

// covers M4
func TestDashboardLinter(t *testing.T) {
	bin := linter(t)
	files, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if out, err := lint(t, bin, f); err != nil {
			t.Errorf("dashboard-linter lint --strict %s: %v\n%s", f, err, out)
		}
	}
	// The same linter and configuration reject a hard-coded datasource.
	dir := t.TempDir()
	for _, f := range []string{".lint", "overview.json"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == "overview.json" {
			data = []byte(strings.ReplaceAll(string(data), `"uid": "${datasource}"`, `"uid": "P1809F7CD0C75ACF3"`))
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := lint(t, bin, filepath.Join(dir, "overview.json")); err == nil {
		t.Errorf("dashboard-linter accepted a hard-coded datasource uid:\n%s", out)
	}
}

// promtoolCheck writes each expression as a recording rule and runs
// promtool check rules on them; Grafana variables are replaced by values
// that keep the expression's structure.
func promtoolCheck(t *testing.T, qs []query) error {
	t.Helper()
	vars := regexp.MustCompile(`\$\{?\w+\}?`)
	var rules []map[string]string
	for i, q := range qs {
		expr := strings.ReplaceAll(q.expr, "$__rate_interval", "5m")
		expr = vars.ReplaceAllString(expr, ".+")
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard_query_%d", i), "expr": expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "queries.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = promtest.Promtool(dir, "check", "rules", "queries.yaml")
	return err
}

func TestQueriesParseAsPromQL(t *testing.T) {
	var qs []query
	for file, d := range load(t) {
		qs = append(qs, queries(t, file, d)...)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].where < qs[j].where })
	if err := promtoolCheck(t, qs); err != nil {
		for i, q := range qs {
			t.Logf("dashboard_query_%d: %s: %s", i, q.where, q.expr)
		}
		t.Fatal(err)
	}
	if err := promtoolCheck(t, []query{{where: "broken", expr: `sum(rate(x_total[$__rate_interval])`}}); err == nil {
		t.Error("promtool accepted an unbalanced expression")
	}
}

// known is every metric name a query may use: registered by a component
// (histograms with their series suffixes), recorded by a rule, or listed as
// external or planned in the catalog.
func known(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	registered, err := catalog.Registered()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range registered {
		out[m.Name] = "registered by " + m.Component
		if m.Type == "histogram" || m.Type == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+s] = "registered by " + m.Component
			}
		}
	}
	spec, err := prometheusrules.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range spec.RecordedNames() {
		out[r] = "recording rule"
	}
	listed, err := catalog.Listed()
	if err != nil {
		t.Fatal(err)
	}
	for name := range listed {
		out[name] = "listed"
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			out[name+s] = "listed"
		}
	}
	return out
}

// unknownMetrics returns the metric names of expr that are not in known.
func unknownMetrics(expr string, known map[string]string) ([]string, error) {
	names, err := catalog.MetricNames(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if _, ok := known[n]; !ok {
			out = append(out, n)
		}
	}
	return out, nil
}

func TestUnknownMetrics(t *testing.T) {
	k := map[string]string{"a_total": "", "h_bucket": ""}
	got, err := unknownMetrics(`sum(rate(a_total[5m])) / sum(rate(b_total[5m])) + histogram_quantile(0.9, rate(h_bucket[5m]))`, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "b_total" {
		t.Errorf("unknownMetrics = %v, want [b_total]", got)
	}
}

// TestQueriesUseKnownMetrics fails when a dashboard or a rule uses a metric
// that no component registers, no recording rule defines and the catalog
// does not list; and when a listed external or planned metric is no longer
// used (a stale allow-list hides renames).
func TestQueriesUseKnownMetrics(t *testing.T) {
	k := known(t)
	var qs []query
	for file, d := range load(t) {
		qs = append(qs, queries(t, file, d)...)
	}
	spec, err := prometheusrules.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: fmt.Sprintf("rule %s%s in group %s", r.Record, r.Alert, g.Name), expr: r.Expr})
		}
	}
	used := map[string]bool{}
	for _, q := range qs {
		names, err := catalog.MetricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		for _, n := range names {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
			used[n] = true
		}
		unknown, err := unknownMetrics(q.expr, k)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		for _, n := range unknown {
			t.Errorf("%s uses %s, which no component registers, no recording rule defines and hack/metricsdoc/catalog does not list", q.where, n)
		}
	}
	listed, err := catalog.Listed()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range catalog.SortedKeys(listed) {
		if !used[name] {
			t.Errorf("catalog lists %s (%s) but no dashboard or rule uses it", name, listed[name])
		}
	}
}
