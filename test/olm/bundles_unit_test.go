package olm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/test/framework"
)

// TestLoopbackBundleIsMinimal checks the test copy of the shipped bundle: every file but the CSV
// unchanged, and in the CSV only the install Deployment's loopback settings.
func TestLoopbackBundleIsMinimal(t *testing.T) {
	root := framework.RepoRoot()
	src := filepath.Join(root, "bundle")
	dst := t.TempDir()
	if err := loopbackBundle(src, dst, filepath.Join(root, "config", "overlays", "emulated", "operator.yaml")); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == csvFile {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		a, _ := os.ReadFile(path)
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs in the test copy (%v)", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	before, after := readCSV(t, filepath.Join(src, "manifests", csvFile)), readCSV(t, filepath.Join(dst, "manifests", csvFile))
	depBefore := deploymentSpec(before)
	depAfter := deploymentSpec(after)
	// Outside the Deployment: identical.
	if diff := cmp.Diff(without(before), without(after)); diff != "" {
		t.Errorf("the CSV differs outside its install Deployment (-shipped +test copy):\n%s", diff)
	}

	want := deepCopy(t, depBefore)
	want["strategy"] = map[string]any{"type": "Recreate"}
	pod := nested(want, "template", "spec").(map[string]any)
	pod["hostNetwork"] = true
	pod["dnsPolicy"] = "ClusterFirstWithHostNet"
	c := pod["containers"].([]any)[0].(map[string]any)
	c["args"] = []any{"--leader-elect=true", "--metrics-bind-address=127.0.0.1:18443",
		"--health-probe-bind-address=127.0.0.1:18081", "--host-network-address=127.0.0.1"}
	c["ports"] = []any{
		map[string]any{"name": "metrics", "containerPort": float64(18443), "protocol": "TCP"},
		map[string]any{"name": "health", "containerPort": float64(18081), "protocol": "TCP"},
	}
	for _, p := range []string{"livenessProbe", "readinessProbe"} {
		get := c[p].(map[string]any)["httpGet"].(map[string]any)
		get["host"], get["port"] = "127.0.0.1", float64(18081)
	}
	c["env"] = append([]any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "16443"},
	}, c["env"].([]any)...)
	if diff := cmp.Diff(want, depAfter); diff != "" {
		t.Errorf("install Deployment of the test copy (-want +got):\n%s", diff)
	}
}

func readCSV(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func deploymentSpec(csv map[string]any) map[string]any {
	return nested(csv, "spec", "install", "spec", "deployments").([]any)[0].(map[string]any)["spec"].(map[string]any)
}

// without is csv without its install Deployment's spec.
func without(csv map[string]any) map[string]any {
	raw, _ := yaml.Marshal(csv)
	var m map[string]any
	_ = yaml.Unmarshal(raw, &m)
	delete(nested(m, "spec", "install", "spec", "deployments").([]any)[0].(map[string]any), "spec")
	return m
}

func deepCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	raw, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPreviousBundle checks the "previous" test bundle: the current CSV with the version, name,
// skipRange and image tags of the release before, no replaces, and nothing else changed.
func TestPreviousBundle(t *testing.T) {
	root := framework.RepoRoot()
	src := filepath.Join(root, "bundle")
	dst := t.TempDir()
	if err := previousBundle(src, dst, "0.2.0", "0.1.99"); err != nil {
		t.Fatal(err)
	}
	before, after := readCSV(t, filepath.Join(src, "manifests", csvFile)), readCSV(t, filepath.Join(dst, "manifests", csvFile))
	if got := nested(after, "metadata", "name"); got != "slicer-operator.v0.1.99" {
		t.Errorf("name %v", got)
	}
	if got := nested(after, "spec", "version"); got != "0.1.99" {
		t.Errorf("version %v", got)
	}
	if got := nested(after, "spec", "replaces"); got != nil {
		t.Errorf("replaces %v, want none", got)
	}
	if got := nested(after, "metadata", "annotations", "olm.skipRange"); got != "<0.1.99" {
		t.Errorf("skipRange %v", got)
	}
	raw, err := yaml.Marshal(after)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"quay.io/slicer-operator/slicer-operator:v0.1.99", "quay.io/slicer-operator/slicer-webhook:v0.1.99",
		"quay.io/slicer-operator/slicer-agent:v0.1.99", "quay.io/slicer-operator/slicer-scheduler:v0.1.99-k8s-1.37",
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the previous CSV does not name %s", want)
		}
	}
	// Back to the current release's name, version, replaces, skipRange and tags: the same CSV.
	back := deepCopy(t, after)
	back["metadata"].(map[string]any)["name"] = nested(before, "metadata", "name")
	back["metadata"].(map[string]any)["annotations"].(map[string]any)["olm.skipRange"] = nested(before, "metadata", "annotations", "olm.skipRange")
	back["spec"].(map[string]any)["version"] = nested(before, "spec", "version")
	back["spec"].(map[string]any)["replaces"] = nested(before, "spec", "replaces")
	rawBack, err := yaml.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	var restored map[string]any
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(string(rawBack), ":v0.1.99", ":v0.2.0")), &restored); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, restored); d != "" {
		t.Errorf("the previous CSV differs beyond name, version, replaces, skipRange and tags (-current +previous):\n%s", d)
	}
}
