// Package evaltest evaluates nfd-rules/nodefeaturerule.yaml offline with
// NFD's own rule engine against recorded NodeFeature objects. It is a
// separate module so NFD's full dependency graph stays out of Slicer's.
package evaltest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"
	"sigs.k8s.io/yaml"
)

func load(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// labelsFor runs every rule of the NodeFeatureRule the way nfd-master does
// and merges the labels.
func labelsFor(t *testing.T, rule *nfdv1alpha1.NodeFeatureRule, features *nfdv1alpha1.Features) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range rule.Spec.Rules {
		res, err := nodefeaturerule.Execute(&rule.Spec.Rules[i], features, true)
		if err != nil {
			t.Fatalf("rule %q: %v", rule.Spec.Rules[i].Name, err)
		}
		for k, v := range res.Labels {
			out[k] = v
		}
	}
	return out
}

func TestRuleAgainstRecordedNodes(t *testing.T) {
	rule := &nfdv1alpha1.NodeFeatureRule{}
	load(t, filepath.Join("..", "nodefeaturerule.yaml"), rule)
	mig := func(model string) map[string]string {
		return map[string]string{"slicer.dev/mig-capable": "true", "slicer.dev/gpu-model": model}
	}
	for node, want := range map[string]map[string]string{
		"h100-sxm":              mig("H100-80GB"),
		"a100-pcie-40gb":        mig("A100-40GB"),
		"a30":                   mig("A30-24GB"),
		"b200":                  mig("B200-180GB"),
		"l4-no-mig":             {},
		"intel-vga":             {},
		"nvidia-audio-function": {},
	} {
		nf := &nfdv1alpha1.NodeFeature{}
		load(t, filepath.Join("testdata", node+".yaml"), nf)
		got := labelsFor(t, rule, &nf.Spec.Features)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s labels (-want +got):\n%s", node, diff)
		}
	}
}

// An extra expression like the ones the Slicer CR adds (here: vfio-pci not
// loaded) is honoured by NFD's engine.
func TestExtraExpression(t *testing.T) {
	rule := &nfdv1alpha1.NodeFeatureRule{}
	load(t, filepath.Join("..", "nodefeaturerule.yaml"), rule)
	set := nfdv1alpha1.MatchExpressionSet{"vfio_pci": &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchDoesNotExist}}
	for i := range rule.Spec.Rules {
		rule.Spec.Rules[i].MatchFeatures = append(rule.Spec.Rules[i].MatchFeatures, nfdv1alpha1.FeatureMatcherTerm{Feature: "kernel.loadedmodule", MatchExpressions: &set})
	}
	nf := &nfdv1alpha1.NodeFeature{}
	load(t, filepath.Join("testdata", "h100-sxm.yaml"), nf)
	nf.Spec.Features.Flags = map[string]nfdv1alpha1.FlagFeatureSet{"kernel.loadedmodule": {Elements: map[string]nfdv1alpha1.Nil{"vfio_pci": {}}}}
	if got := labelsFor(t, rule, &nf.Spec.Features); len(got) != 0 {
		t.Errorf("node with vfio_pci loaded labelled %v", got)
	}
	nf.Spec.Features.Flags = map[string]nfdv1alpha1.FlagFeatureSet{"kernel.loadedmodule": {Elements: map[string]nfdv1alpha1.Nil{"nvidia": {}}}}
	if got := labelsFor(t, rule, &nf.Spec.Features); got["slicer.dev/mig-capable"] != "true" {
		t.Errorf("node without vfio_pci not labelled: %v", got)
	}
}
