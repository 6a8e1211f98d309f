package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/hack/internal/genfiles"
)

const repoRoot = "../.."

func generate(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every placeholder became template text, and crds/ is config/crd/bases byte for byte.
func TestTemplatesAreFilledAndCRDsVerbatim(t *testing.T) {
	files := generate(t)
	for n, b := range files {
		if bytes.Contains(b, []byte("__HELM_")) {
			t.Errorf("%s keeps a placeholder", n)
		}
	}
	bases, err := filepath.Glob(filepath.Join(repoRoot, "config/crd/bases/*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("config/crd/bases: %v (%d files)", err, len(bases))
	}
	for _, p := range bases {
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := files["crds/"+filepath.Base(p)]; !bytes.Equal(got, want) {
			t.Errorf("crds/%s differs from %s", filepath.Base(p), p)
		}
	}
}

// values.yaml, values.schema.json and README.md describe the same values:
// every leaf of values.yaml has a described schema, and README.md lists it.
func TestEveryValueIsDocumented(t *testing.T) {
	files := generate(t)
	var values, schema obj
	if err := yaml.Unmarshal(files["values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(files["values.schema.json"], &schema); err != nil {
		t.Fatal(err)
	}
	readme := string(files["README.md"])
	var walk func(path string, v obj, s obj)
	walk = func(path string, v obj, s obj) {
		props, _ := s["properties"].(obj)
		for k, x := range v {
			p := strings.TrimPrefix(path+"."+k, ".")
			ps, ok := props[k].(obj)
			if !ok {
				t.Errorf("%s: not in values.schema.json", p)
				continue
			}
			if d, _ := ps["description"].(string); d == "" {
				t.Errorf("%s: no description in values.schema.json", p)
			}
			if sub, isGroup := x.(obj); isGroup && ps["additionalProperties"] == false && ps["required"] != nil {
				walk(p, sub, ps)
				continue
			}
			if !strings.Contains(readme, "| `"+p+"` |") {
				t.Errorf("%s: not in README.md's table", p)
			}
		}
	}
	walk("", values, schema)
	if schema["additionalProperties"] != false {
		t.Error("values.schema.json must reject unknown top-level values")
	}
}

// The Slicer's default spec is config/samples' Slicer, and its schema the CRD's.
func TestSlicerSpecFromSampleAndCRD(t *testing.T) {
	files := generate(t)
	var values, sample, schema obj
	if err := yaml.Unmarshal(files["values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if err := genfiles.ReadYAML(filepath.Join(repoRoot, "config/samples/slicer_v1alpha1_slicer.yaml"), &sample); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(dig(values, "slicer", "spec"))
	want, _ := json.Marshal(sample["spec"])
	if !bytes.Equal(got, want) {
		t.Errorf("slicer.spec default\n got %s\nwant %s", got, want)
	}
	if err := json.Unmarshal(files["values.schema.json"], &schema); err != nil {
		t.Fatal(err)
	}
	modes, _ := dig(schema, "properties", "slicer", "properties", "spec", "properties", "driver", "properties", "mode", "enum").([]any)
	if len(modes) == 0 {
		t.Error("slicer.spec.driver.mode has no enum in values.schema.json: the CRD's schema was not embedded")
	}
}

// A config/ object in a namespace other than the operator's is refused, not silently left fixed.
func TestForeignNamespaceRefused(t *testing.T) {
	o := obj{"kind": "Service", "metadata": obj{"name": "x", "namespace": "elsewhere"}}
	if _, _, err := template(o, "slicer-system"); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("want an error naming the namespace, got %v", err)
	}
}

// config/default with anything the generator does not render (a patch, another part) is refused.
func TestConfigDefaultItDoesNotRenderRefused(t *testing.T) {
	for name, k := range map[string]string{
		"patch":      "resources: [../crd, ../rbac, ../manager, ../samples]\npatches: [{path: p.yaml}]\n",
		"other part": "resources: [../crd, ../rbac, ../manager, ../samples, ../monitoring]\n",
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "config/default"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "config/default/kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkDefault(root); err == nil {
			t.Errorf("%s: config/default accepted", name)
		}
	}
	if err := checkDefault(repoRoot); err != nil {
		t.Errorf("this repository's config/default: %v", err)
	}
}
