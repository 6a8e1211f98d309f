package prometheusrules

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/prometheusrules/promtest"
)

// writeRuleFile extracts .spec of the embedded PrometheusRule into
// dir/rules.yaml, the name the promtool tests in tests/ refer to.
func writeRuleFile(t *testing.T, dir string) {
	t.Helper()
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	data, err := spec.RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// covers M2
func TestPromtoolCheckRules(t *testing.T) {
	dir := t.TempDir()
	writeRuleFile(t, dir)
	out, err := promtest.Promtool(dir, "check", "rules", "--lint=all", "--lint-fatal", "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
}

// covers M3
func TestPromtoolTestRules(t *testing.T) {
	dir := t.TempDir()
	writeRuleFile(t, dir)
	files := testFiles(t)
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	out, err := promtest.Promtool(dir, append([]string{"test", "rules"}, names...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no promtool tests in prometheusrules/tests")
	}
	sort.Strings(files)
	return files
}

var alertName = regexp.MustCompile(`^Slicer[A-Z][A-Za-z0-9]+$`)

// checkAlert returns the convention violations of one alerting rule
// (docs/design/invariants.md, alert conventions): CamelCase name with the Slicer prefix, a severity,
// summary, description, a runbook_url pointing at docs/runbooks/<alert>.md
// that exists under repoRoot, and a namespace label unless the expression
// keeps the namespace of the object it is about.
func checkAlert(r Rule, repoRoot string) []string {
	var errs []string
	if !alertName.MatchString(r.Alert) {
		errs = append(errs, "name is not CamelCase with the Slicer prefix")
	}
	switch r.Labels["severity"] {
	case "critical", "warning", "info":
	default:
		errs = append(errs, "severity label is not critical, warning or info")
	}
	for _, a := range []string{"summary", "description", "runbook_url"} {
		if strings.TrimSpace(r.Annotations[a]) == "" {
			errs = append(errs, "annotation "+a+" is missing")
		}
	}
	runbook := "docs/runbooks/" + r.Alert + ".md"
	if got := r.Annotations["runbook_url"]; got != "" && got != RunbookBaseURL+runbook {
		errs = append(errs, "runbook_url is "+got+", want "+RunbookBaseURL+runbook)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, runbook)); err != nil {
		errs = append(errs, "runbook "+runbook+" does not exist")
	}
	if r.Labels["namespace"] == "" && !regexp.MustCompile(`by \([^)]*\bnamespace\b`).MatchString(r.Expr) {
		errs = append(errs, "no namespace label and the expression does not keep one")
	}
	return errs
}

func TestCheckAlertCatchesViolations(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs", "runbooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", "runbooks", "SlicerGood.md"), []byte("# SlicerGood\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := Rule{
		Alert: "SlicerGood", Expr: "up == 0",
		Labels:      map[string]string{"severity": "warning", "namespace": "slicer-system"},
		Annotations: map[string]string{"summary": "s", "description": "d", "runbook_url": RunbookBaseURL + "docs/runbooks/SlicerGood.md"},
	}
	tests := map[string]struct {
		edit func(r *Rule)
		want []string
	}{
		"good": {edit: func(*Rule) {}},
		"namespace from the expression": {edit: func(r *Rule) {
			delete(r.Labels, "namespace")
			r.Expr = "max by (namespace, pod) (x) > 0"
		}},
		"bad name": {edit: func(r *Rule) { r.Alert = "slicer_good" }, want: []string{
			"name is not CamelCase with the Slicer prefix",
			"runbook_url is " + RunbookBaseURL + "docs/runbooks/SlicerGood.md, want " + RunbookBaseURL + "docs/runbooks/slicer_good.md",
			"runbook docs/runbooks/slicer_good.md does not exist",
		}},
		"no severity":    {edit: func(r *Rule) { r.Labels["severity"] = "page" }, want: []string{"severity label is not critical, warning or info"}},
		"no runbook_url": {edit: func(r *Rule) { delete(r.Annotations, "runbook_url") }, want: []string{"annotation runbook_url is missing"}},
		"no summary":     {edit: func(r *Rule) { r.Annotations["summary"] = " " }, want: []string{"annotation summary is missing"}},
		"no namespace":   {edit: func(r *Rule) { delete(r.Labels, "namespace") }, want: []string{"no namespace label and the expression does not keep one"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := good
			r.Labels = map[string]string{}
			r.Annotations = map[string]string{}
			for k, v := range good.Labels {
				r.Labels[k] = v
			}
			for k, v := range good.Annotations {
				r.Annotations[k] = v
			}
			tc.edit(&r)
			if diff := cmp.Diff(tc.want, checkAlert(r, root)); diff != "" {
				t.Errorf("checkAlert (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAlertConventions(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Alerts()) == 0 {
		t.Fatal("no alerts")
	}
	for _, r := range spec.Alerts() {
		for _, e := range checkAlert(r, promtest.RepoRoot()) {
			t.Errorf("alert %s: %s", r.Alert, e)
		}
	}
}

// runbookSections are the headings every runbook has.
var runbookSections = []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation"}

func TestRunbooks(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, a := range spec.AlertNames() {
		alerts[a] = true
	}
	files, err := filepath.Glob(filepath.Join(promtest.RepoRoot(), "docs", "runbooks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".md")
		if name == "README" {
			continue
		}
		if !alerts[name] {
			t.Errorf("runbook %s has no alert", f)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if !strings.HasPrefix(text, "# "+name+"\n") {
			t.Errorf("runbook %s does not start with the heading # %s", f, name)
		}
		for _, s := range runbookSections {
			if !strings.Contains(text, "\n"+s+"\n") {
				t.Errorf("runbook %s lacks section %q", f, s)
			}
		}
		if !strings.Contains(text, "```shell\n") {
			t.Errorf("runbook %s has no diagnosis commands (a ```shell block)", f)
		}
	}
}

// testFile is the part of a promtool test file this package checks.
type testFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// caseCoverage is, per alert name, whether some test expects it to fire and
// some test expects it to stay quiet.
type caseCoverage struct{ Firing, Quiet bool }

func coverage(files map[string][]byte) (map[string]caseCoverage, error) {
	out := map[string]caseCoverage{}
	for _, data := range files {
		var tf testFile
		if err := yaml.Unmarshal(data, &tf); err != nil {
			return nil, err
		}
		for _, tc := range tf.Tests {
			for _, at := range tc.AlertRuleTests {
				c := out[at.Alertname]
				if len(at.ExpAlerts) > 0 {
					c.Firing = true
				} else {
					c.Quiet = true
				}
				out[at.Alertname] = c
			}
		}
	}
	return out, nil
}

func TestCoverageCountsFiringAndQuietCases(t *testing.T) {
	got, err := coverage(map[string][]byte{"a.yaml": []byte(`
rule_files: [rules.yaml]
tests:
- alert_rule_test:
  - {eval_time: 1m, alertname: A, exp_alerts: []}
  - eval_time: 2m
    alertname: A
    exp_alerts:
    - exp_labels: {severity: warning}
  - {eval_time: 1m, alertname: B}
- alert_rule_test:
  - eval_time: 2m
    alertname: C
    exp_alerts:
    - exp_labels: {severity: warning}
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]caseCoverage{"A": {Firing: true, Quiet: true}, "B": {Quiet: true}, "C": {Firing: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("coverage (-want +got):\n%s", diff)
	}
}

func TestEveryAlertHasFiringAndQuietCase(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range testFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		files[f] = data
	}
	cov, err := coverage(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range spec.AlertNames() {
		c := cov[a]
		if !c.Firing {
			t.Errorf("alert %s has no promtool test case where it fires (non-empty exp_alerts)", a)
		}
		if !c.Quiet {
			t.Errorf("alert %s has no promtool test case where it stays quiet (empty exp_alerts)", a)
		}
		delete(cov, a)
	}
	for a := range cov {
		t.Errorf("promtool tests name alert %s, which the rules do not define", a)
	}
}

func TestRuleFileRoundTrip(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	data, err := spec.RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := yaml.UnmarshalStrict(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*spec, back); diff != "" {
		t.Errorf("rule file round trip (-want +got):\n%s", diff)
	}
	if _, err := Parse([]byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil {
		t.Error("Parse accepted a ConfigMap")
	}
	if _, err := Parse([]byte("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nspec: {groups: [{name: a, rules: [{alert: A, expr: x, bogus: 1}]}]}\n")); err == nil {
		t.Error("Parse accepted an unknown field")
	}
}
