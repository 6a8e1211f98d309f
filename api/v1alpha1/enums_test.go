package v1alpha1_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/slicer-operator/slicer/internal/mig"
)

// The CRD enums for profiles and models are generated from markers; the
// geometry lives in internal/mig. These tests keep the two in step.

func loadCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatalf("parse CRD: %v", err)
	}
	return crd
}

func enumAt(t *testing.T, schema apiextensionsv1.JSONSchemaProps, path ...string) []string {
	t.Helper()
	for _, p := range path {
		if p == "[]" {
			schema = *schema.Items.Schema
			continue
		}
		next, ok := schema.Properties[p]
		if !ok {
			t.Fatalf("no property %q on the path %v", p, path)
		}
		schema = next
	}
	out := make([]string, 0, len(schema.Enum))
	for _, e := range schema.Enum {
		var s string
		if err := yaml.Unmarshal(e.Raw, &s); err != nil {
			t.Fatalf("enum value %s: %v", e.Raw, err)
		}
		out = append(out, s)
	}
	return out
}

func TestProfileEnumMatchesModelTables(t *testing.T) {
	crd := loadCRD(t, "slicer.dev_sliceallocations.yaml")
	got := enumAt(t, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec", "profile")
	if diff := cmp.Diff(mig.KnownProfileNames(), got); diff != "" {
		t.Errorf("MIGProfile enum differs from internal/mig (-tables +crd):\n%s", diff)
	}
}

func TestModelEnumMatchesModelTables(t *testing.T) {
	crd := loadCRD(t, "slicer.dev_nodeaccelerators.yaml")
	got := enumAt(t, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "status", "gpus", "[]", "model")
	var want []string
	for _, m := range mig.Models() {
		want = append(want, m.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUModel enum differs from internal/mig (-tables +crd):\n%s", diff)
	}
}
