// Package evaltest evaluates nfd-rules/nodefeaturerule.yaml offline with
// NFD's own rule engine against recorded NodeFeature objects. It is a
// separate module so NFD's full dependency graph stays out of Slicer's.
package evaltest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
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
		"h100-sxm":       mig("H100-80GB"),
		"a100-pcie-40gb": mig("A100-40GB"),
		"a30":            mig("A30-24GB"),
		"b200":           mig("B200-180GB"),
		"h200-nvl":       mig("H200-141GB"),
		"h100-sxm5-94gb": mig("H100-94GB"),
		"gh200-144g":     mig("GH200-144GB"),
		// NVIDIA's HGX B200 168GB is not the 180 GB part: no MIG geometry is published for it.
		"b200-168gb":            {},
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

// Every device id the rule matches is an NVIDIA device of the PCI ID database: the copy of its
// NVIDIA section that internal/mig pins (internal/mig/testdata/pci.ids.10de), read as text so
// that this module stays apart from Slicer's. Which source confirmed each id for its model is
// said in internal/mig/pciids_test.go.
func TestDeviceIDsAreInThePCIIDDatabase(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "internal", "mig", "testdata", "pci.ids.10de"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := map[string]string{}
	vendor := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "10de  "):
			vendor = true
		case vendor && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t"):
			id, name, _ := strings.Cut(strings.TrimPrefix(line, "\t"), "  ")
			known[id] = name
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	rule := &nfdv1alpha1.NodeFeatureRule{}
	load(t, filepath.Join("..", "nodefeaturerule.yaml"), rule)
	for _, r := range rule.Spec.Rules {
		for _, term := range r.MatchFeatures {
			me := *term.MatchExpressions
			if v := me["vendor"]; v == nil || len(v.Value) != 1 || v.Value[0] != "10de" {
				t.Errorf("rule %q: vendor %v, want 10de", r.Name, v)
			}
			for _, id := range me["device"].Value {
				if _, ok := known[id]; !ok {
					t.Errorf("rule %q matches device %s, which the PCI ID database does not list for NVIDIA", r.Name, id)
				}
			}
		}
	}
}
